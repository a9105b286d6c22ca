//! Transfer lanes: copies that overlap compute.
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
//! * The **compute lane** is the queue of the original contract: [`Backend::copy`],
//!   [`Backend::fill_zero`], [`Backend::dispatch`], [`Backend::completed`], [`Backend::wait`] and
//!   every [`Ticket`] keep meaning exactly what they meant, so pools, the validating front and
//!   callers that know nothing of lanes are unchanged.
//! * The **transfer lane** takes copies and fills ([`Backend::transfer_copy`],
//!   [`Backend::transfer_fill_zero`]) and numbers them with [`TransferTicket`]s, completed in
//!   order ([`Backend::transfer_completed`]).
//! * **Cross-lane order is explicit and device-side.** [`Backend::transfer_after`] makes later
//!   transfer work start after a compute ticket; [`Backend::compute_after`] makes later compute
//!   work start after a transfer ticket and returns the compute ticket of that wait, the
//!   *joined ticket*: it completes only once the transfer work has. Neither involves the host
//!   (host backend: the workers' counters; CUDA: an event recorded on one stream and
//!   `cuStreamWaitEvent` on the other; Vulkan: a timeline semaphore between queues).
//! * **Freeing memory the transfer lane touches.** Pools defer frees by compute tickets. A caller
//!   that frees a range a transfer copy still reads or writes frees it after the joined ticket of
//!   that copy; the front does this by itself for [`Runtime::free`](crate::Runtime::free): its
//!   `last_use` joins any unfinished transfer use of the range and returns the joined ticket.
//!   Without uses outstanding, the lanes never wait for each other.
//! * **Hazards are the caller's.** Work on the two lanes that touches overlapping bytes without an
//!   order between them is a race on every backend, as between two CUDA streams.
//!
//! # Concurrent or collapsed
//!
//! [`Backend::transfer_lane`] says whether the lane really runs beside compute
//! ([`TransferLane::Concurrent`]: the host backend's second worker thread, CUDA's copy stream,
//! Vulkan's own submissions and timeline semaphore on a transfer queue, or on the compute queue
//! where there is one, since submissions to one Vulkan queue are not execution-ordered unless
//! synchronised). Where it cannot (WebGPU has one queue and one timeline), the lane is
//! [`TransferLane::Collapsed`] onto the compute queue: the trait's
//! default methods enqueue transfer work as compute work and a transfer ticket *is* the compute
//! ticket of that work, so cross-lane waits hold by queue order and results are identical.
//!
//! Completion never has to block on either lane: [`Backend::poll_transfer`] and its future
//! [`TransferWait`] are the awaitable forms of [`Backend::wait_transfer`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{Backend, Ticket};
use crate::Result;

/// A point on the transfer lane's timeline: transfer work gets increasing tickets, and
/// `TransferTicket(0)` is "before any transfer work" and always complete. Not comparable with a
/// compute [`Ticket`]: only [`Backend::compute_after`] turns one into the other.
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

/// Resolves once `ticket` and every earlier transfer ticket have finished (see
/// [`Backend::poll_transfer`]).
#[must_use = "futures do nothing unless awaited"]
pub struct TransferWait<'a> {
    backend: &'a dyn Backend,
    ticket: TransferTicket,
}

impl<'a> TransferWait<'a> {
    /// A future for transfer `ticket` on `backend`.
    pub fn new(backend: &'a dyn Backend, ticket: TransferTicket) -> Self {
        TransferWait { backend, ticket }
    }
}

impl Future for TransferWait<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.backend.poll_transfer(self.ticket, cx)
    }
}

/// The compute ticket a collapsed lane's transfer ticket stands for.
pub(crate) fn collapsed(ticket: TransferTicket) -> Ticket {
    Ticket(ticket.0)
}

/// The transfer ticket of compute work on a collapsed lane.
pub(crate) fn as_transfer(ticket: Ticket) -> TransferTicket {
    TransferTicket(ticket.0)
}
