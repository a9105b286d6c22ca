//! Transfer lanes: copies that overlap compute, the optional capability a backend offers through
//! [`Extensions::transfer_lanes`](crate::backend::Extensions::transfer_lanes).
//!
//! A backend runs its work on two *lanes*, each an ordered stream with its own tickets:
//!
//! ```text
//!   compute lane   ── dispatch ── copy ── [wait T:7] ── dispatch ──▶  Ticket(1, 2, 3, ...)
//!                                            ▲
//!   transfer lane  ── [wait C:2] ── copy ── copy(T:7) ─────────────▶  TransferTicket(1, 2, ...)
//!                          ▲
//!                    after compute ticket 2
//! ```
//!
//! * The **compute lane** is the queue of [`Backend`]: its copies, fills, dispatches, waits and
//!   [`Ticket`]s know nothing of lanes.
//! * The **transfer lane** ([`TransferLanes`]) takes copies and fills and numbers them with
//!   [`TransferTicket`]s, completed in order. **Cross-lane order is explicit and device-side**:
//!   [`TransferLanes::transfer_after`] makes later transfer work start after a compute ticket;
//!   [`TransferLanes::compute_after`] makes later compute work start after a transfer ticket and
//!   returns the *joined ticket*, a compute ticket that completes only once the transfer has
//!   (host backend: the workers' counters; CUDA: an event and `cuStreamWaitEvent`; Vulkan: a
//!   timeline semaphore between queues).
//! * **Freeing memory the transfer lane touches** happens after the joined ticket of that work;
//!   the front's `last_use` joins unfinished transfer uses of a range by itself. Work on both
//!   lanes that touches overlapping bytes without an order between them is the caller's race.
//!
//! # Every backend has a lane
//!
//! [`lanes::of`](of) is how callers reach it: the backend's own [`TransferLanes`] where
//! [`Extensions::transfer_lanes`](crate::backend::Extensions::transfer_lanes) offers one (the host's second worker, CUDA's copy stream, Vulkan's
//! queues), otherwise a [`CollapsedLane`] over the compute queue (WebGPU has one queue and one
//! timeline): transfer work is compute work and a transfer ticket *is* the compute ticket of its
//! work, so cross-lane waits hold by queue order and results are identical. An implementation
//! may itself report [`TransferLane::Collapsed`] (Vulkan with its lane off, which keeps its own
//! ticket checks). The `Validated` (in `tensormem`) front always offers the lane, so it can
//! check and record transfer tickets; it reports the kind of the lane behind it. Reaching the
//! lane costs one virtual call and no allocation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{Backend, BlockRange, Ticket};
use crate::Result;

mod collapsed;

pub use collapsed::{CollapsedLane, Lanes, of};

/// A point on the transfer lane's timeline: transfer work gets increasing tickets, and
/// `TransferTicket(0)` is "before any transfer work" and always complete. Not comparable with a
/// compute [`Ticket`]: only [`TransferLanes::compute_after`] turns one into the other.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransferTicket(pub u64);

impl TransferTicket {
    /// The transfer ticket that is complete before any transfer work is submitted.
    pub const DONE: TransferTicket = TransferTicket(0);
}

/// Whether a backend's transfer lane runs beside its compute lane.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferLane {
    /// Transfer work runs concurrently with compute work, on its own queue or thread.
    Concurrent,
    /// Transfer work runs on the compute queue, in submission order with compute work: a transfer
    /// ticket is the compute ticket of its work.
    Collapsed,
}

impl TransferLane {
    /// Short lowercase name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            TransferLane::Concurrent => "concurrent",
            TransferLane::Collapsed => "collapsed",
        }
    }
}

/// The transfer lane, reached through [`of`] (or [`Extensions::transfer_lanes`](crate::backend::Extensions::transfer_lanes) where a backend
/// runs one of its own). See the module doc.
///
/// Every method keeps the contract of [`Backend`]: no panics, native failures mapped into
/// [`Error`](crate::Error), validated input (the front checks ranges and tickets as it does on the
/// compute lane). Copies and fills follow the compute lane's rules of alignment and direction.
pub trait TransferLanes: Send + Sync {
    /// Whether the lane runs beside the compute lane. Constant for the backend's lifetime.
    fn transfer_lane(&self) -> TransferLane;

    /// Enqueues a copy as [`Backend::copy`], on the transfer lane: it starts after the earlier
    /// transfer work and after the compute ticket of the latest
    /// [`TransferLanes::transfer_after`], and runs beside later compute work. Compute work sees
    /// its bytes only after [`TransferLanes::compute_after`] with its ticket.
    ///
    /// # Errors
    /// As [`Backend::copy`].
    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket>;

    /// Enqueues filling `range` with zero bytes on the transfer lane (as
    /// [`TransferLanes::transfer_copy`]).
    ///
    /// # Errors
    /// As [`Backend::fill_zero`].
    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket>;

    /// Makes transfer work enqueued from now on start after compute `ticket` (and every earlier
    /// compute ticket) has finished, with a device-side wait. A collapsed lane already runs in
    /// compute order: nothing to do.
    ///
    /// # Errors
    /// [`Error::UnknownTicket`](crate::Error::UnknownTicket) for a ticket never issued,
    /// [`Error::DeviceLost`](crate::Error::DeviceLost).
    fn transfer_after(&self, ticket: Ticket) -> Result<()>;

    /// Makes compute work enqueued from now on start after transfer `ticket` (and every earlier
    /// transfer ticket) has finished, with a device-side wait, and returns the *joined ticket*:
    /// a compute ticket that completes only after `ticket` has. A pool frees memory the transfer
    /// work touched after the joined ticket. On a collapsed lane the transfer ticket already is
    /// a compute ticket.
    ///
    /// # Errors
    /// As [`TransferLanes::transfer_after`].
    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket>;

    /// The highest transfer ticket such that it and every earlier transfer ticket have finished.
    /// Does not block.
    ///
    /// # Errors
    /// As [`Backend::completed`].
    fn transfer_completed(&self) -> Result<TransferTicket>;

    /// Blocks until transfer `ticket` has finished, for at most `timeout` (as
    /// [`Backend::wait_timeout`]). Native only: on `wasm32` await [`TransferWait`].
    ///
    /// # Errors
    /// As [`Backend::wait_timeout`].
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<Duration>,
    ) -> Result<()>;

    /// [`TransferLanes::wait_transfer_timeout`] with the default limit.
    ///
    /// # Errors
    /// As [`Backend::wait_timeout`].
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer(&self, ticket: TransferTicket) -> Result<()> {
        self.wait_transfer_timeout(ticket, None)
    }

    /// Polls whether transfer `ticket` and every earlier transfer ticket have finished; never
    /// blocks (as [`Backend::poll_ticket`]).
    ///
    /// # Errors
    /// As [`Backend::poll_ticket`].
    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>>;

    /// Total time the compute lane has spent waiting for the transfer lane
    /// ([`TransferLanes::compute_after`]) since the backend was created, over the waits that have
    /// finished; never decreases. Measured where the lane is concurrent: the host backend's
    /// compute worker times each wait, CUDA times the compute stream between events recorded
    /// around its `cuStreamWaitEvent`, Vulkan reads timestamps on the compute queue (the end of
    /// the batch before a wait, the start of the batch that waits). `None` (the default) where
    /// nothing is measured: a collapsed lane has no cross-lane waits (WebGPU; Vulkan with the
    /// lane off), so its transfers' cost is queue time shared with compute, not a wait, and a
    /// Vulkan compute queue without timestamps (`timestampValidBits` 0) cannot time its waits.
    fn transfer_stall(&self) -> Option<Duration> {
        None
    }
}

/// Resolves once `ticket` and every earlier transfer ticket have finished (see
/// [`TransferLanes::poll_transfer`]).
#[must_use = "futures do nothing unless awaited"]
pub struct TransferWait<'a> {
    backend: &'a dyn Backend,
    ticket: TransferTicket,
}

impl<'a> TransferWait<'a> {
    /// A future for transfer `ticket` on `backend`'s lane ([`of`]).
    pub fn new(backend: &'a dyn Backend, ticket: TransferTicket) -> Self {
        TransferWait { backend, ticket }
    }
}

impl Future for TransferWait<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        of(self.backend).poll_transfer(self.ticket, cx)
    }
}
