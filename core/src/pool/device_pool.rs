//! The `DevicePool` trait: the one small interface every pool and every pool feature implements.
//!
//! Modelled on RMM's `device_memory_resource`: a pool allocates and frees byte ranges of blocks,
//! nothing more. Every feature beyond carving (guard margins, zero-on-reuse, tracing, leak
//! reports) is an *adaptor*: a type that implements `DevicePool` by wrapping another
//! `DevicePool`, so features compose in any order and a pool that does not use a feature does not
//! carry it. [`ArenaPool`](crate::pool::ArenaPool) (TLSF carving and growth),
//! [`ReplayPool`](crate::pool::ReplayPool) (record and replay) and a user's own pool are the
//! bottoms of such stacks; a [`Runtime`](crate::Runtime) holds the top as `Arc<dyn DevicePool>`.
//!
//! # Contract
//! * **Handles pass through adaptors.** An adaptor returns its inner pool's [`Handle`] and keys any
//!   state of its own by it, so a handle means the same allocation at every layer. A pool that
//!   issues its own handles (the replay pool) is a bottom, not an adaptor.
//! * **Transactional.** A call that returns an error leaves the pool (and every pool below it) as
//!   it was: a failed `allocate` holds nothing, a failed `free_after` keeps the allocation live and
//!   freeable. An adaptor whose own step fails after its inner `allocate` succeeded undoes it with
//!   [`DevicePool::cancel`], which also returns a block reserved for that allocation.
//! * **Never blocks on device work in `allocate`**, except where a feature needs finished work by
//!   its nature (a guard check on free). Frees of memory used by in-flight work are deferred to its
//!   ticket and reclaimed by polling the backend's `completed()`.
//!
//! Bottom pools report block-level happenings (blocks reserved and released, deferred frees
//! reclaimed) to a [`PoolListener`] if one is installed; the tracing adaptor installs one. Without
//! a listener this costs one atomic load per block event, none per allocation.

use std::sync::Arc;

use crate::Result;
use crate::backend::{BlockId, BlockRange, Ticket};
use crate::pool::expandable::Expandable;
use crate::pool::slots::{Handle, Slots};
use crate::trace::TransferKind;

/// A live allocation: the handle that owns it and where its bytes are. `Copy`; every use is checked
/// against the pool, so a copy kept after `free` is detected, not dangling.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The owning handle.
    pub handle: Handle,
    /// Block, offset and size (the size rounded up to the backend's copy alignment).
    pub range: BlockRange,
}

/// One live allocation, as a leak report lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveAllocation {
    /// Its handle.
    pub handle: Handle,
    /// The label given at allocation.
    pub label: String,
    /// Bytes it holds (after rounding, guard margins included).
    pub size: u64,
}

impl LiveAllocation {
    /// Every live entry of `slots`, largest first, with the label and size `describe` reads from
    /// it: `live_allocations` of each pool that issues its own handles.
    pub(crate) fn all_in<T>(
        slots: &Slots<T>,
        describe: impl Fn(&T) -> (&str, u64),
    ) -> Vec<LiveAllocation> {
        let mut v: Vec<LiveAllocation> = slots
            .iter_handles()
            .map(|(handle, entry)| {
                let (label, size) = describe(entry);
                LiveAllocation {
                    handle,
                    label: label.to_owned(),
                    size,
                }
            })
            .collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.size));
        v
    }
}

/// Counters of one pool. All sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolStats {
    /// Bytes in live allocations now (sizes after rounding, guard margins included).
    pub in_use: u64,
    /// Highest `in_use` seen.
    pub peak_in_use: u64,
    /// Bytes reserved in blocks now.
    pub reserved: u64,
    /// Highest `reserved` seen.
    pub peak_reserved: u64,
    /// Live allocations now.
    pub allocations: usize,
    /// Allocations made since creation (cancelled ones excluded).
    pub total_allocations: u64,
    /// Frees since creation (including deferred ones, counted when requested).
    pub total_frees: u64,
    /// Live blocks now.
    pub blocks: usize,
    /// Blocks reserved from the backend since creation.
    pub blocks_allocated: u64,
    /// Blocks returned to the backend since creation.
    pub blocks_freed: u64,
    /// Bytes whose free waits for in-flight work.
    pub pending_free: u64,
    /// Out-of-memory errors returned.
    pub oom_count: u64,
}

/// One pool, or one feature wrapped around a pool. See the module doc for the contract.
pub trait DevicePool: Send + Sync {
    /// Name used in reports and errors ("device", "host-visible (upload)", ...).
    fn name(&self) -> &str;

    /// Allocates `size` bytes aligned to `align` (a power of two; the pool may align more).
    ///
    /// # Errors
    /// [`Error::ZeroSize`](crate::Error::ZeroSize),
    /// [`Error::InvalidAlignment`](crate::Error::InvalidAlignment),
    /// [`Error::TooLarge`](crate::Error::TooLarge) (hopeless),
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) (retryable, with a report), backend errors.
    /// Nothing is held on error.
    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation>;

    /// Frees an allocation once `ticket` and the allocation's own last use complete.
    ///
    /// # Errors
    /// [`Error::DoubleFree`](crate::Error::DoubleFree),
    /// [`Error::StaleHandle`](crate::Error::StaleHandle),
    /// [`Error::ForeignHandle`](crate::Error::ForeignHandle), backend errors: the allocation is then
    /// still live and can be freed again. [`Error::Corruption`](crate::Error::Corruption) from a
    /// guard check: the allocation *is* freed; the error reports what was found.
    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()>;

    /// Frees an allocation once its last recorded use completes (immediately if none).
    ///
    /// # Errors
    /// As [`DevicePool::free_after`].
    fn free(&self, handle: Handle) -> Result<()> {
        self.free_after(handle, Ticket::DONE)
    }

    /// Undoes an allocation that no device work has used (the caller never handed it out): its
    /// bytes return at once, a block reserved for it alone goes back to the backend, and the
    /// counters (the peaks aside) read as if it had never been made. The rollback of a failed
    /// multi-step allocate.
    ///
    /// # Errors
    /// As [`DevicePool::free_after`].
    fn cancel(&self, handle: Handle) -> Result<()>;

    /// Checks a handle and returns where its bytes are.
    ///
    /// The range stays where it is until the caller [`release`](DevicePool::release)s it: a pool
    /// whose ranges move ([`SpillPool`](crate::pool::SpillPool)) counts each `resolve` (and each
    /// `allocate`) as a lease and moves only allocations with none. A caller that never
    /// releases keeps the allocation in place until it is freed.
    ///
    /// # Errors
    /// [`Error::StaleHandle`](crate::Error::StaleHandle) after the allocation was freed,
    /// [`Error::ForeignHandle`](crate::Error::ForeignHandle).
    fn resolve(&self, handle: Handle) -> Result<BlockRange>;

    /// Where the allocation's bytes are in device memory now, without moving them: `None` while
    /// they are elsewhere (a [`SpillPool`](crate::pool::SpillPool)'s spilled allocation, whose
    /// device work has all completed). What a free asks before it frees: unlike
    /// [`DevicePool::resolve`], it never brings bytes back. The default resolves and releases.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn resident(&self, handle: Handle) -> Result<Option<BlockRange>> {
        let range = self.resolve(handle)?;
        self.release(handle)?;
        Ok(Some(range))
    }

    /// Ends one lease begun by [`DevicePool::resolve`] or [`DevicePool::allocate`]: the caller no
    /// longer touches the range it was given (work it queued on the range is recorded with
    /// [`DevicePool::mark_used`] first). Nothing to do for pools whose ranges never move (the
    /// default). Releasing more often than leasing is harmless.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn release(&self, handle: Handle) -> Result<()> {
        let _ = handle;
        Ok(())
    }

    /// Records that work with `ticket` uses the allocation: its free will wait for that ticket.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()>;

    /// The latest ticket recorded against the allocation.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn last_use(&self, handle: Handle) -> Result<Ticket>;

    /// The label given at allocation.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn label(&self, handle: Handle) -> Result<String>;

    /// Returns to the pool every deferred free whose ticket has completed. Never blocks.
    ///
    /// # Errors
    /// Backend errors ([`Error::DeviceLost`](crate::Error::DeviceLost)).
    fn reclaim(&self) -> Result<()>;

    /// Returns every idle (empty) block to the backend, after reclaiming completed frees. Returns
    /// the bytes released. The runtime's pressure path calls it on every pool before reporting out
    /// of memory.
    ///
    /// # Errors
    /// Backend errors; blocks already released stay released.
    fn trim(&self) -> Result<u64>;

    /// Counters of the pool.
    fn stats(&self) -> PoolStats;

    /// Live allocations, largest first: what the leak report and the OOM report list.
    fn live_allocations(&self) -> Vec<LiveAllocation>;

    /// Installs (`Some`) or removes (`None`) the listener that hears about blocks and reclaimed
    /// frees. Adaptors forward it; a pool without blocks ignores it.
    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>);

    /// Checks the pool's internal invariants (tests and the failure-injection suite).
    ///
    /// # Errors
    /// A description of the first broken invariant.
    fn check_invariants(&self) -> std::result::Result<(), String>;

    /// Allocations that grow in place, where the pool offers them (default `None`).
    fn expandable(&self) -> Option<&dyn Expandable> {
        None
    }
}

/// Hears what happens below the allocate/free interface of a bottom pool: the events a tracer
/// needs that no adaptor can see from above.
pub trait PoolListener: Send + Sync {
    /// The pool reserved a block of `size` bytes from the backend.
    fn block_reserved(&self, pool: &str, block: BlockId, size: u64);
    /// The pool returned a block of `size` bytes to the backend.
    fn block_released(&self, pool: &str, block: BlockId, size: u64);
    /// The bytes of a freed allocation went back to the sub-allocator (after its last use).
    fn reclaimed(&self, handle: Handle);
    /// A live allocation's bytes left device memory for host memory or came back
    /// ([`TransferKind::Spill`], [`TransferKind::Restore`]: a [`SpillPool`](crate::pool::SpillPool)).
    fn transferred(&self, handle: Handle, kind: TransferKind, size: u64) {
        let _ = (handle, kind, size);
    }
}

/// An adaptor: a [`DevicePool`] that wraps another pool and changes only some of its behaviour.
///
/// Every method defaults to the same call on [`PoolAdaptor::inner`], so an adaptor writes only the
/// methods it changes, and a blanket impl makes every `PoolAdaptor` a `DevicePool`. The wrapped
/// pool is an associated type, not a trait object, so a forwarded call is a direct (inlinable)
/// call: an adaptor costs nothing for the methods it leaves alone.
///
/// Implement this trait *or* `DevicePool`, never both. Calls made on a concrete adaptor type with
/// both traits in scope are ambiguous, so implementations name this trait by path rather than
/// importing it; callers use `DevicePool`.
pub trait PoolAdaptor: Send + Sync {
    /// The pool this adaptor wraps.
    type Inner: DevicePool + ?Sized;

    /// The wrapped pool.
    fn inner(&self) -> &Self::Inner;

    /// As [`DevicePool::name`]; forwards by default.
    fn name(&self) -> &str {
        self.inner().name()
    }

    /// As [`DevicePool::allocate`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::allocate`].
    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        self.inner().allocate(size, align, label)
    }

    /// As [`DevicePool::free_after`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::free_after`].
    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.inner().free_after(handle, ticket)
    }

    /// As [`DevicePool::cancel`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::cancel`].
    fn cancel(&self, handle: Handle) -> Result<()> {
        self.inner().cancel(handle)
    }

    /// As [`DevicePool::resolve`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        self.inner().resolve(handle)
    }

    /// As [`DevicePool::resident`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    fn resident(&self, handle: Handle) -> Result<Option<BlockRange>> {
        self.inner().resident(handle)
    }

    /// As [`DevicePool::mark_used`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::mark_used`].
    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.inner().mark_used(handle, ticket)
    }

    /// As [`DevicePool::release`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::release`].
    fn release(&self, handle: Handle) -> Result<()> {
        self.inner().release(handle)
    }

    /// As [`DevicePool::last_use`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::last_use`].
    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        self.inner().last_use(handle)
    }

    /// As [`DevicePool::label`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::label`].
    fn label(&self, handle: Handle) -> Result<String> {
        self.inner().label(handle)
    }

    /// As [`DevicePool::reclaim`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::reclaim`].
    fn reclaim(&self) -> Result<()> {
        self.inner().reclaim()
    }

    /// As [`DevicePool::trim`]; forwards by default.
    ///
    /// # Errors
    /// As [`DevicePool::trim`].
    fn trim(&self) -> Result<u64> {
        self.inner().trim()
    }

    /// As [`DevicePool::stats`]; forwards by default.
    fn stats(&self) -> PoolStats {
        self.inner().stats()
    }

    /// As [`DevicePool::live_allocations`]; forwards by default.
    fn live_allocations(&self) -> Vec<LiveAllocation> {
        self.inner().live_allocations()
    }

    /// As [`DevicePool::set_listener`]; forwards by default.
    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.inner().set_listener(listener)
    }

    /// As [`DevicePool::check_invariants`]; forwards by default. An adaptor with state of its own
    /// checks it after the inner pool's.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner().check_invariants()
    }

    /// As [`DevicePool::expandable`]: `None` by default, since forwarded, allocations would
    /// pass the adaptor by; an adaptor that sees them (or needs not) opts in.
    fn expandable(&self) -> Option<&dyn Expandable> {
        None
    }
}

/// Every adaptor is a pool.
impl<A: PoolAdaptor> DevicePool for A {
    fn name(&self) -> &str {
        PoolAdaptor::name(self)
    }
    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        PoolAdaptor::allocate(self, size, align, label)
    }
    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        PoolAdaptor::free_after(self, handle, ticket)
    }
    fn cancel(&self, handle: Handle) -> Result<()> {
        PoolAdaptor::cancel(self, handle)
    }
    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        PoolAdaptor::resolve(self, handle)
    }
    fn resident(&self, handle: Handle) -> Result<Option<BlockRange>> {
        PoolAdaptor::resident(self, handle)
    }
    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        PoolAdaptor::mark_used(self, handle, ticket)
    }
    fn release(&self, handle: Handle) -> Result<()> {
        PoolAdaptor::release(self, handle)
    }
    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        PoolAdaptor::last_use(self, handle)
    }
    fn label(&self, handle: Handle) -> Result<String> {
        PoolAdaptor::label(self, handle)
    }
    fn reclaim(&self) -> Result<()> {
        PoolAdaptor::reclaim(self)
    }
    fn trim(&self) -> Result<u64> {
        PoolAdaptor::trim(self)
    }
    fn stats(&self) -> PoolStats {
        PoolAdaptor::stats(self)
    }
    fn live_allocations(&self) -> Vec<LiveAllocation> {
        PoolAdaptor::live_allocations(self)
    }
    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        PoolAdaptor::set_listener(self, listener)
    }
    fn check_invariants(&self) -> std::result::Result<(), String> {
        PoolAdaptor::check_invariants(self)
    }
    fn expandable(&self) -> Option<&dyn Expandable> {
        PoolAdaptor::expandable(self)
    }
}

/// A shared pool is the pool it points to: the adaptor that changes nothing.
impl<P: DevicePool + ?Sized> PoolAdaptor for Arc<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        self
    }

    fn expandable(&self) -> Option<&dyn Expandable> {
        (**self).expandable()
    }
}

/// A lease on an allocation's range ([`DevicePool::resolve`] to [`DevicePool::release`]), ended
/// when dropped, on every path: how the runtime holds a range while it copies or dispatches.
#[must_use = "the range may move once the lease is dropped"]
pub(crate) struct Lease<'a> {
    pool: &'a dyn DevicePool,
    handle: Handle,
}

impl<'a> Lease<'a> {
    /// Resolves `handle` and holds the range until the lease is dropped.
    ///
    /// # Errors
    /// As [`DevicePool::resolve`].
    pub(crate) fn resolve(pool: &'a dyn DevicePool, handle: Handle) -> Result<(BlockRange, Self)> {
        let range = pool.resolve(handle)?;
        Ok((range, Lease { pool, handle }))
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        // Only a freed handle can fail, and it holds nothing any more.
        let _ = self.pool.release(self.handle);
    }
}
