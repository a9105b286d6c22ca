//! The `Backend` trait: the one thing a device implements.
//!
//! The trait is deliberately narrow: a backend allocates and frees *blocks*, copies bytes,
//! dispatches standard ops, issues and reports *tickets*, states its capabilities and maps native
//! errors into [`Error`](crate::Error). Pooling, budgets, statistics, validation and staging all
//! live above it in core, once, for every backend. The trait is object safe (`Arc<dyn Backend>`).
//!
//! # Contract
//!
//! * **Blocks** are one native allocation each, of one [`MemoryKind`], never resized. Blocks
//!   that grow in place are the optional [`Growable`] capability ([`growable`]).
//! * **Host access.** [`Backend::write_mapped`] and [`Backend::read_mapped`] are synchronous
//!   copies to and from a host-visible block (`Upload` and `Readback` always, `DeviceLocal` where
//!   [`Capabilities::device_host_visible`]); the caller guarantees no in-flight work touches the
//!   range.
//! * **Device work** ([`Backend::copy`], [`Backend::fill_zero`], [`Backend::dispatch`]) is
//!   asynchronous on one logical queue: each call returns the [`Ticket`] of its submission and
//!   observes every earlier call's effects (the backend inserts its API's barriers). Batched
//!   work is submitted no later than the first [`Backend::wait_timeout`], [`Backend::completed`]
//!   or [`Backend::flush`] that concerns it. Copies read `DeviceLocal`, `Managed` and `Upload`
//!   memory and write `DeviceLocal`, `Managed` and `Readback` (the reverse too where
//!   [`Capabilities::host_visible_copies`]).
//! * **Tickets** increase monotonically; `completed()` is the highest `t` with every ticket
//!   `<= t` finished. The pools defer frees of memory in use until its ticket completes.
//! * **Alignment.** Copy and mapped offsets and sizes are multiples of
//!   [`Capabilities::copy_align`], binding offsets of [`Capabilities::binding_align`].
//! * **Completion never has to block** ([`completion`]): [`Backend::poll_ticket`] and
//!   [`Backend::poll_host_access`] register wakers ([`TicketWait`], [`HostAccessWait`]); the
//!   blocking [`Backend::wait_timeout`] is not compiled on `wasm32`.
//! * **Optional capabilities**: a second ordered lane for copies ([`TransferLanes`], [`lanes`];
//!   [`CollapsedLane`] where the backend has none, [`lanes::of`] reaches either), managed memory
//!   ([`Managed`], [`managed`]) and direct copies between backends ([`Peer`], [`peer`]), each
//!   reached through [`Extensions`].
//! * **Errors.** No method panics; a lost device is [`Error::DeviceLost`](crate::Error::DeviceLost).
//! * **Validated input.** Callers go through `Validated` (in `tensormem`), which checks every
//!   rule above with one typed error each; a backend debug-asserts it and keeps only the lookups
//!   and bounds checks that keep a direct caller memory-safe.

use std::any::Any;
use std::task::{Context, Poll};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

use crate::Result;
use crate::ops::Op;

mod adaptor;
mod blocks;
mod capabilities;
pub mod completion;
mod device_id;
pub mod growable;
pub mod lanes;
pub mod managed;
pub mod peer;
mod placement;

pub use adaptor::BackendAdaptor;
pub use blocks::{BlockEntry, BlockTable};
pub use capabilities::{Capabilities, DeviceType};
pub use completion::{HostAccess, HostAccessWait, MappedAccess, TicketWait, TicketWakers, Waiting};
pub use device_id::DeviceId;
pub use growable::{Growable, InPlaceGrowth};
pub use lanes::{CollapsedLane, Lanes, TransferLane, TransferLanes, TransferTicket, TransferWait};
pub use managed::{Managed, ManagedMemory, Residence};
pub use peer::{Peer, PeerCopy, PeerPath, PeerRanges};
pub use placement::HostPlacement;

/// A backend's name for one block. Opaque to core; unique among the backend's live blocks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u64);

/// A point on the backend's timeline. Submissions get increasing tickets; `Ticket(0)` is "before
/// anything was submitted" and is always complete.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

impl Ticket {
    /// The ticket that is complete before any work is submitted.
    pub const DONE: Ticket = Ticket(0);
}

/// What a block is for, which decides where its memory lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory for tensors. Host-visible only where the device is (integrated GPUs, lavapipe).
    DeviceLocal,
    /// Host-visible, write-combined memory: the source of host-to-device copies.
    Upload,
    /// Host-visible, cached memory: the destination of device-to-host copies.
    Readback,
    /// One allocation the host and the device both address, kept where it is used by the driver
    /// (CUDA managed memory), or device memory that is host memory. Kernels bind it, copies read
    /// and write it, the host maps it. Only where [`Extensions::managed`] offers it; see
    /// [`managed`].
    Managed,
}

impl MemoryKind {
    /// Short lowercase name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::DeviceLocal => "device-local",
            MemoryKind::Upload => "upload",
            MemoryKind::Readback => "readback",
            MemoryKind::Managed => "managed",
        }
    }
}

/// Creation arguments of a block.
#[derive(Clone, Debug)]
pub struct BlockDesc<'a> {
    /// Where the block lives.
    pub kind: MemoryKind,
    /// Size in bytes; a multiple of [`Capabilities::copy_align`], at most
    /// [`Capabilities::max_block_size`].
    pub size: u64,
    /// A label for native debug tools.
    pub label: &'a str,
}

impl<'a> BlockDesc<'a> {
    /// A block of `size` bytes of `kind`, labelled `label`.
    pub fn new(kind: MemoryKind, size: u64, label: &'a str) -> Self {
        BlockDesc { kind, size, label }
    }
}

/// A byte range of a block, as bound to a kernel or used in a copy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BlockRange {
    /// The block.
    pub block: BlockId,
    /// Start of the range in bytes.
    pub offset: u64,
    /// Length of the range in bytes.
    pub size: u64,
}

impl BlockRange {
    /// The first `size` bytes of `block` (all of it when `size` is the block's size).
    pub fn whole(block: BlockId, size: u64) -> Self {
        BlockRange {
            block,
            offset: 0,
            size,
        }
    }
}

/// One device. See the module doc for the contract every implementation keeps.
///
/// `Any` lets a backend recognise a peer of its own type in [`Peer::copy_to_peer`].
pub trait Backend: Any + Send + Sync {
    /// What this device can do. Constant for the backend's lifetime.
    fn capabilities(&self) -> &Capabilities;

    /// Allocates one block.
    ///
    /// # Errors
    /// [`Error::ZeroSize`](crate::Error::ZeroSize), [`Error::TooLarge`](crate::Error::TooLarge)
    /// beyond `max_block_size`, [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the driver
    /// has no memory left, [`Error::DeviceLost`](crate::Error::DeviceLost).
    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId>;

    /// Frees a block. The caller guarantees that no in-flight work uses it.
    ///
    /// # Errors
    /// [`Error::UnknownBlock`](crate::Error::UnknownBlock) for an unknown block.
    fn free_block(&self, block: BlockId) -> Result<()>;

    /// Copies `data` into a host-visible block at `offset`, synchronously.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) when the block is not host-visible,
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) past the block's end.
    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()>;

    /// Copies from a host-visible block at `offset` into `out`, synchronously.
    ///
    /// # Errors
    /// As [`Backend::write_mapped`].
    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()>;

    /// Writes `data` into any block through the backend's own queue-ordered upload path (wgpu
    /// `queue.write_buffer`, CUDA `cuMemcpyHtoDAsync`), ordered with the other enqueued work.
    /// `data` is copied out before the call returns. Returns `Ok(None)` when the backend has no such
    /// path (the default); the pools then stage through an `Upload` block.
    ///
    /// # Errors
    /// As [`Backend::copy`].
    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        let _ = (dst, data);
        Ok(None)
    }

    /// Enqueues a device copy of `src.size` bytes from `src` to `dst.offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds), [`Error::SizeMismatch`](crate::Error::SizeMismatch)
    /// when `src.size != dst.size`, [`Error::DeviceLost`](crate::Error::DeviceLost).
    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket>;

    /// Enqueues filling `range` with zero bytes.
    ///
    /// # Errors
    /// As [`Backend::copy`].
    fn fill_zero(&self, range: BlockRange) -> Result<Ticket>;

    /// Enqueues one standard op. `bindings` are the op's inputs followed by its outputs, in the
    /// order [`Op`] documents.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) for an op the backend lacks,
    /// [`Error::TooLarge`](crate::Error::TooLarge) for a binding beyond `max_binding_size`,
    /// [`Error::BindingCount`](crate::Error::BindingCount) or
    /// [`Error::BindingSize`](crate::Error::BindingSize) for bindings that do not match the op.
    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket>;

    /// Submits everything enqueued so far. Returns the ticket of the last enqueued work.
    fn flush(&self) -> Result<Ticket>;

    /// The highest ticket such that it and every earlier ticket have finished. Does not block.
    ///
    /// # Errors
    /// [`Error::DeviceLost`](crate::Error::DeviceLost).
    fn completed(&self) -> Result<Ticket>;

    /// Blocks until `ticket` has finished (submitting it first if needed), for at most
    /// `timeout`: `None` is the backend's own default limit (its config's `wait_timeout`; the
    /// host backend has none), `Some(Duration::MAX)` waits forever. Native only: on `wasm32` await
    /// [`TicketWait`] instead.
    ///
    /// # Errors
    /// [`Error::DeviceLost`](crate::Error::DeviceLost); [`Error::Timeout`](crate::Error::Timeout)
    /// when the limit runs out (the work stays queued and the device usable: waiting again can
    /// succeed).
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()>;

    /// Polls whether `ticket` and every earlier ticket have finished, submitting it first if
    /// needed; never blocks. While pending, the backend arranges for `cx`'s waker to be woken when
    /// polling again can make progress. The default asks to be polled again at once (correct on
    /// every backend, a busy poll through the executor); backends that learn of completion from a
    /// thread or callback override it to wake exactly.
    ///
    /// # Errors
    /// As [`Backend::wait_timeout`], and [`Error::UnknownTicket`](crate::Error::UnknownTicket) for
    /// a ticket that was never issued.
    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        completion::poll_ticket_by_polling(self, ticket, cx)
    }

    /// Polls whether `request.block` can take mapped `request.access` ([`Backend::read_mapped`]
    /// or [`Backend::write_mapped`]) without blocking, starting the mapping if the backend maps
    /// asynchronously (WebGPU's `mapAsync`). The caller has already waited for the block's work.
    /// The default is ready at once: host, Vulkan and CUDA memory stays mapped.
    ///
    /// # Errors
    /// As [`Backend::read_mapped`]: an unknown or non-host-visible block, a failed mapping.
    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let _ = (request, cx);
        Poll::Ready(Ok(()))
    }

    /// The optional capabilities the backend offers, each a trait of its own: blocks that grow
    /// in place, a transfer lane, managed memory, direct copies to a peer. The default offers
    /// none. Callers reach them through [`Extensions::growable`] and its siblings (methods of
    /// `dyn Backend`).
    fn extensions(&self) -> Extensions<'_> {
        Extensions::default()
    }
}

/// The optional capability traits a backend offers ([`Backend::extensions`]): each is `None`
/// where the backend lacks it.
#[derive(Clone, Copy, Default)]
pub struct Extensions<'a> {
    /// Blocks that grow in place; without them the pools add blocks. See [`growable`].
    pub growable: Option<&'a dyn Growable>,
    /// A transfer lane of the backend's own; without one the lane collapses onto the compute
    /// queue ([`CollapsedLane`]). See [`lanes`].
    pub transfer_lanes: Option<&'a dyn TransferLanes>,
    /// Managed memory ([`MemoryKind::Managed`] blocks); without it the front refuses the kind.
    /// See [`managed`].
    pub managed: Option<&'a dyn Managed>,
    /// Direct copies to another backend; without them callers stage through host memory. See
    /// [`peer`].
    pub peer: Option<&'a dyn Peer>,
}

impl std::fmt::Debug for Extensions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("growable", &self.growable.is_some())
            .field("transfer_lanes", &self.transfer_lanes.is_some())
            .field("managed", &self.managed.is_some())
            .field("peer", &self.peer.is_some())
            .finish()
    }
}

/// What every backend offers on top of the trait, built from it.
impl<'b> dyn Backend + 'b {
    /// [`Backend::wait_timeout`] with the default limit: what every pool and the runtime call,
    /// so the validating front's limit (`RuntimeConfig::wait_timeout`) applies to all of them.
    ///
    /// # Errors
    /// As [`Backend::wait_timeout`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&self, ticket: Ticket) -> Result<()> {
        self.wait_timeout(ticket, None)
    }

    /// Blocks that grow in place, where the backend offers them ([`Extensions::growable`]).
    pub fn growable(&self) -> Option<&dyn Growable> {
        self.extensions().growable
    }

    /// The backend's own transfer lane, where it runs one ([`Extensions::transfer_lanes`]).
    /// Callers go through [`lanes::of`], which collapses the lane where there is none.
    pub fn transfer_lanes(&self) -> Option<&dyn TransferLanes> {
        self.extensions().transfer_lanes
    }

    /// Managed memory, where the backend serves it ([`Extensions::managed`]).
    pub fn managed(&self) -> Option<&dyn Managed> {
        self.extensions().managed
    }

    /// Direct copies to another backend, where there is a path ([`Extensions::peer`]).
    pub fn peer(&self) -> Option<&dyn Peer> {
        self.extensions().peer
    }
}
