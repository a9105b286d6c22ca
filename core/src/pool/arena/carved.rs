//! The shared carver under the arena pool's bottom pools: backend blocks carved by TLSF (or
//! buddy), handles in slots, ticket-deferred frees, the counters, the listener and the lost
//! device. [`Carved`] is generic over a [`Kind`], which says what its blocks are and how the
//! pool grows: blocks by request class ([`Classes`](super::growth::Classes)), one arena that
//! grows in place ([`InPlace`](super::in_place::InPlace)), or one reservation per expandable
//! allocation ([`Dedicated`](super::expandable::Dedicated)). Every kind is a
//! [`DevicePool`](crate::pool::DevicePool) of its own ([`api`](super::api)).
//!
//! Invariants: a block index in a live allocation or a pending free names a block of this pool;
//! `stats.reserved` is the sum of the blocks' committed bytes, all charged to the budget;
//! `stats.in_use` the sum of the live regions. Every failing call leaves the pool as it was.
//!
//! Costs: one lock per call; placement is the kind's (TLSF: O(1) per block tried).

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use super::carving::Carving;
use super::totals::Totals;
use super::{ArenaConfig, MAX_ALIGN};
use crate::align::align_up;
use crate::backend::{Backend, BlockId, MemoryKind, Ticket};
use crate::pool::budget::Budget;
use crate::pool::deferred::Deferred;
use crate::pool::device_pool::{PoolListener, PoolStats};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::suballoc::Region;
use crate::time::Instant;
use crate::{Error, Result};

/// What a block of a kind carries beside its carving.
pub(super) trait Role: Debug + Send {
    /// Bytes of the block's extent not backed by memory.
    fn decommitted(&self) -> u64 {
        0
    }

    /// Address space reserved for the block, where it can grow in place.
    fn reserved(&self) -> Option<u64> {
        None
    }

    /// The block's extent is now `extent` bytes, all committed past the old end.
    fn resized(&mut self, _extent: u64) {}
}

/// What one bottom pool's blocks are, and how it grows: the parts of allocation, free, trim and
/// cancel that differ between the kinds. The defaults are a kind with nothing to add.
pub(super) trait Kind: Sized + Send + Sync + 'static {
    type Role: Role;

    /// Places a request in the pool's blocks as they are.
    fn existing(
        pool: &Carved<Self>,
        st: &mut State<Self>,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>>;

    /// Grows the pool for a request that fits nowhere; `Ok(None)` when it cannot.
    fn grow(
        pool: &Carved<Self>,
        st: &mut State<Self>,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>>;

    /// Bytes growing would add for a request of `size` bytes ([`pending`](super::pending)).
    fn growth_step(_st: &State<Self>, size: u64) -> u64 {
        size
    }

    /// The granule the pool's allowance is counted in.
    fn granule(_st: &State<Self>) -> u64 {
        super::holes::MIN_GRANULE
    }

    /// A request of `size` at `align` was placed at `region` of block `index`.
    fn placed(_st: &mut State<Self>, _index: usize, _region: &Region, _size: u64, _align: u64) {}

    /// `freed` went back to block `index`'s carving, into the free range `merged`.
    fn released(
        _pool: &Carved<Self>,
        _st: &mut State<Self>,
        _index: usize,
        _freed: (u64, u64),
        _merged: (u64, u64),
    ) -> Result<()> {
        Ok(())
    }

    /// Gives back what the kind holds beyond empty blocks (trim); the bytes given back.
    fn trimmed(_pool: &Carved<Self>, _st: &mut State<Self>) -> Result<u64> {
        Ok(0)
    }

    /// An allocation in block `index`, for which the pool grew `grown` bytes, was cancelled and
    /// its region returned; `drained` when no queued work may still touch it.
    fn cancelled(
        _pool: &Carved<Self>,
        _st: &mut State<Self>,
        _index: usize,
        _grown: u64,
        _drained: bool,
    ) {
    }

    /// The pool's expandable allocations, where the kind makes them.
    fn expandable(_pool: &Carved<Self>) -> Option<&dyn crate::pool::Expandable> {
        None
    }

    /// The kind's invariants of block `index`.
    fn check_block(
        _st: &State<Self>,
        _index: usize,
        _block: &Block<Self::Role>,
    ) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// A backend block and its carving.
pub(super) struct Block<R> {
    pub(super) id: BlockId,
    /// Bytes of the block's extent; always its carver's capacity.
    pub(super) size: u64,
    pub(super) carving: Carving,
    /// When the block last became empty ([`ArenaConfig::idle_release`]); meaningful only while
    /// its carving is empty.
    pub(super) idle_since: Option<Instant>,
    pub(super) role: R,
}

impl<R: Role> Block<R> {
    /// Bytes backed by memory: `size` less what the role left decommitted.
    pub(super) fn committed(&self) -> u64 {
        self.size - self.role.decommitted()
    }
}

/// A live allocation.
pub(super) struct Live {
    pub(super) block: usize,
    /// The sub-allocated region; its size is the request rounded to the copy alignment.
    pub(super) region: Region,
    pub(super) label: String,
    pub(super) last_use: Ticket,
    /// Whether the block was reserved for this allocation (a cancel returns it).
    pub(super) fresh_block: bool,
    /// Bytes the arena grew in place for this allocation (a cancel gives them back).
    pub(super) grown: u64,
}

/// Everything behind the pool's lock.
pub(super) struct State<K: Kind> {
    /// `None` entries are blocks returned; indices stay stable for `Live::block`.
    pub(super) blocks: Vec<Option<Block<K::Role>>>,
    pub(super) slots: Slots<Live>,
    /// Frees waiting for a ticket: block index, region, the freed handle (for the listener).
    pub(super) deferred: Deferred<(usize, Region, Handle)>,
    pub(super) stats: PoolStats,
    /// Set by the first backend call that reported the device lost (backend, detail); every
    /// later allocate fails with [`Error::DeviceLost`].
    pub(super) lost: Option<(&'static str, String)>,
}

/// A place found for a request.
pub(super) struct Place {
    pub(super) block: usize,
    pub(super) region: Region,
    /// Whether the block was reserved for this request.
    pub(super) fresh_block: bool,
    /// Bytes the arena grew in place for this request.
    pub(super) grown: u64,
}

impl Place {
    pub(super) fn existing((block, region): (usize, Region)) -> Self {
        Place {
            block,
            region,
            fresh_block: false,
            grown: 0,
        }
    }
}

/// A bottom pool of kind `K`: blocks of one memory kind, carved, behind one lock.
pub(super) struct Carved<K: Kind> {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) config: ArenaConfig,
    /// Alignment every allocation gets at least: the binding alignment for device memory, the
    /// copy alignment otherwise.
    pub(super) base_align: u64,
    pub(super) copy_align: u64,
    pub(super) budget: Arc<Budget>,
    /// Whether `budget` is shared with other pools (else its reservations are exactly this
    /// pool's).
    pub(super) shared_budget: bool,
    /// Whether `listener` is set: block events skip the lock when it is not.
    heard: AtomicBool,
    listener: RwLock<Option<Arc<dyn PoolListener>>>,
    state: Mutex<State<K>>,
    /// Reserved and live bytes with their peaks, shared with the other bottom pools of one
    /// arena pool.
    pub(super) totals: Arc<Totals>,
    /// The pool id of the handles this pool issues.
    pool_id: u32,
    /// What the kind keeps that never changes (how the backend grows blocks, say).
    pub(super) kind: K,
}

impl<K: Kind> Carved<K> {
    /// An empty pool of `kind` on `budget`; `config` already clamped ([`super::ArenaPool`]).
    pub(super) fn new(
        backend: Arc<dyn Backend>,
        config: ArenaConfig,
        budget: Arc<Budget>,
        shared_budget: bool,
        totals: Arc<Totals>,
        kind: K,
    ) -> Self {
        let (base_align, copy_align) = alignments(backend.as_ref(), config.kind);
        let pool_id = next_pool_id();
        Carved {
            pool_id,
            totals,
            base_align,
            copy_align,
            budget,
            shared_budget,
            heard: AtomicBool::new(false),
            listener: RwLock::new(None),
            state: Mutex::new(State {
                blocks: Vec::new(),
                slots: Slots::new(pool_id, "allocation"),
                deferred: Deferred::new(),
                stats: PoolStats::default(),
                lost: None,
            }),
            backend,
            config,
            kind,
        }
    }

    /// Counts a change of `before` reserved bytes to `after` (of a block, or of all of them).
    pub(super) fn count_reserved(&self, s: &mut PoolStats, before: u64, after: u64) {
        s.reserved = s.reserved - before + after;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        self.totals.reserved(before, after);
    }

    /// Counts `added` live bytes, and `removed` ones.
    pub(super) fn count_in_use(&self, s: &mut PoolStats, added: u64, removed: u64) {
        s.in_use = s.in_use + added - removed;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        self.totals.in_use(removed, added);
    }

    /// Whether `handle` was issued by this pool.
    pub(super) fn owns(&self, handle: Handle) -> bool {
        handle.pool() == self.pool_id
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, for a pool being dropped.
    pub(super) fn state_mut(&mut self) -> &mut State<K> {
        self.state.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Installs or removes the listener of block events.
    pub(super) fn listen(&self, listener: Option<Arc<dyn PoolListener>>) {
        let mut l = self
            .listener
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        self.heard.store(listener.is_some(), Ordering::Release);
        *l = listener;
    }

    /// Calls `f` with the listener, if one is installed.
    pub(super) fn notify(&self, f: impl FnOnce(&dyn PoolListener)) {
        if self.heard.load(Ordering::Acquire) {
            let l = self.listener.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(l) = l.as_deref() {
                f(l);
            }
        }
    }

    /// Refuses with [`Error::DeviceLost`] once a backend call reported the device lost.
    pub(super) fn check_alive(st: &State<K>) -> Result<()> {
        match &st.lost {
            Some((backend, detail)) => Err(Error::DeviceLost {
                backend,
                detail: detail.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Passes a backend result through, remembering a lost device.
    pub(super) fn remember_loss<T>(st: &mut State<K>, r: Result<T>) -> Result<T> {
        if let Err(Error::DeviceLost { backend, detail }) = &r {
            st.lost.get_or_insert_with(|| (*backend, detail.clone()));
        }
        r
    }

    /// The request rounded to the copy alignment, and the alignment raised to the pool's base.
    pub(super) fn check_request(&self, size: u64, align: u64) -> Result<(u64, u64)> {
        check_request(
            self.backend.as_ref(),
            &self.budget,
            self.copy_align,
            size,
            align,
        )
        .map(|(rounded, align)| (rounded, align.max(self.base_align)))
    }

    /// Places a request at `stage`; `Ok(None)` when it finds no room there.
    pub(super) fn place(
        &self,
        st: &mut State<K>,
        size: u64,
        align: u64,
        label: &str,
        stage: Stage,
    ) -> Result<Option<Place>> {
        match stage {
            Stage::Existing => {
                for attempt in 0..2 {
                    if attempt == 1 {
                        if st.deferred.bytes() == 0 {
                            break;
                        }
                        self.reclaim_locked(st)?;
                    }
                    if let Some(found) = K::existing(self, st, size, align)? {
                        return Ok(Some(Place::existing(found)));
                    }
                }
                Ok(None)
            }
            Stage::AfterPending => Ok(self
                .after_pending_frees(st, size, align)?
                .map(Place::existing)),
            Stage::Grow => {
                self.release_idle(st);
                K::grow(self, st, size, align, label)
            }
        }
    }

    pub(super) fn block_id(st: &State<K>, block: usize) -> Result<BlockId> {
        st.blocks
            .get(block)
            .and_then(Option::as_ref)
            .map(|b| b.id)
            .ok_or_else(|| {
                Error::invariant("an allocation's block is live", format!("block {block}"))
            })
    }
}

/// How hard a placement tries: the existing blocks (after reclaiming completed frees), then
/// waiting for pending frees ([`pending`](super::pending)), then growing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    Existing,
    AfterPending,
    Grow,
}

impl Stage {
    pub(super) const ALL: [Stage; 3] = [Stage::Existing, Stage::AfterPending, Stage::Grow];
}

/// The request rounded to `copy_align`, and its alignment: refused when zero, badly aligned,
/// larger than a block of the device or than the budget.
fn check_request(
    backend: &dyn Backend,
    budget: &Budget,
    copy_align: u64,
    size: u64,
    align: u64,
) -> Result<(u64, u64)> {
    if size == 0 {
        return Err(Error::ZeroSize { what: "allocation" });
    }
    if align == 0 || !align.is_power_of_two() || align > MAX_ALIGN {
        return Err(Error::InvalidAlignment {
            align,
            max: MAX_ALIGN,
        });
    }
    let limit = backend.capabilities().max_block_size;
    // Not `ok_or`: an error built on every request is dropped on every request.
    let Some(rounded) = align_up(size, copy_align).filter(|r| *r <= limit) else {
        return Err(Error::TooLarge {
            what: "allocation",
            requested: size,
            limit,
            limit_name: "largest block of the device",
        });
    };
    if let Some(budget) = budget.limit()
        && rounded > budget
    {
        return Err(Error::TooLarge {
            what: "allocation",
            requested: size,
            limit: budget,
            limit_name: "pool budget",
        });
    }
    Ok((rounded, align))
}

/// The least alignment of every allocation of a pool of `kind` (the binding alignment for
/// device memory, the copy alignment otherwise), and the copy alignment.
fn alignments(backend: &dyn Backend, kind: MemoryKind) -> (u64, u64) {
    let caps = backend.capabilities();
    let copy_align = caps.copy_align.max(1).next_power_of_two();
    let base = match kind {
        MemoryKind::DeviceLocal | MemoryKind::Managed => {
            caps.binding_align.max(1).next_power_of_two()
        }
        _ => 1,
    };
    (base.max(copy_align), copy_align)
}
