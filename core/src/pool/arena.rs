//! The arena pool: blocks from a backend, carved by TLSF (or buddy: [`ArenaConfig::carver`]),
//! grown on demand, with ticket-deferred frees and an out-of-memory path that explains itself.
//! Nothing else: guard margins, zero-on-reuse, tracing and leak reports are adaptors around it
//! (see [`crate::pool`]).
//!
//! One type serves every memory kind: with [`MemoryKind::DeviceLocal`] it is the device arena pool;
//! with `Upload` or `Readback` it is the host-visible (pinned) pool for host tensors that take part in
//! transfers.
//!
//! # Growth: in place, else blocks
//! Where the backend can grow a block in place ([`Extensions::growable`](crate::backend::Extensions::growable): CUDA virtual memory
//! management, the host's reserve-and-commit), the pool keeps **one arena**: a reservation of
//! address space carved by one TLSF, whose committed size grows at its end as the live set
//! grows and whose free tail is returned by trim ([`in_place`]). Tensors can then be placed
//! anywhere in the arena, so nothing is lost to block boundaries. Elsewhere (Vulkan without
//! sparse binding, wgpu), or once the reservation is full, the pool adds blocks ([`growth`]):
//! small and large requests in separate block classes, blocks sized by the request stream, split
//! and shared, empty ones returned when they no longer fit the stream ([`policy`]).
//!
//! # Out-of-memory path
//! 1. reclaim frees whose tickets completed, retry in the existing blocks;
//! 2. grow the arena in place, else reserve a new block (returning the class's empty blocks
//!    first), if the [`Budget`] allows ([`in_place`] and [`policy`] decide the sizes);
//! 3. if the budget or the driver refuses, trim this pool's empty blocks and retry once;
//! 4. with the pool's lock released, ask every pool of the runtime to release idle blocks
//!    ([`Budget::relieve`]) and retry once more;
//! 5. only then return [`Error::OutOfMemory`] with a report ([`oom`]), whose planner call runs
//!    after the lock is released.
//!
//! Every failing call leaves the pool as it was: a free that cannot ask the backend whether its
//! ticket completed keeps the allocation live; a block whose TLSF cannot be built is returned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::align::align_up;
use crate::backend::{Backend, BlockId, InPlaceGrowth, MemoryKind, Ticket};
use crate::pool::budget::Budget;
use crate::pool::deferred::Deferred;
use crate::pool::device_pool::{PoolListener, PoolStats};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::suballoc::Region;
use crate::time::Instant;
use crate::{Error, Result};

mod api;
mod carving;
mod config;
mod expandable;
mod growth;
mod handles;
mod holes;
mod in_place;
mod invariants;
mod oom;
mod pending;
mod policy;
mod sites;
#[cfg(test)]
mod testing;
mod units;

pub use carving::Carver;
use carving::Carving;
pub use config::{ArenaConfig, DEFAULT_IDLE_RELEASE};
pub use growth::DEFAULT_BLOCK_SIZE;
use growth::Role;
use holes::Holes;
use policy::Class;

/// Largest alignment a pool accepts, in bytes (1 GiB).
pub const MAX_ALIGN: u64 = 1 << 30;

struct Block {
    id: BlockId,
    /// Bytes backed by memory (for the arena that grows in place: its committed size); always
    /// its carver's capacity.
    size: u64,
    carving: Carving,
    /// What the block is for: a regular block of one request class, the arena that grows in
    /// place, or the reservation of one expandable allocation.
    role: Role,
    /// When the block last became empty ([`ArenaConfig::idle_release`]); meaningful only while
    /// its TLSF is empty.
    idle_since: Option<Instant>,
    /// Which granules hold memory, for the arena on a backend with holes; `None` otherwise
    /// (every byte of `size` is committed).
    holes: Option<Holes>,
}

impl Block {
    /// Bytes backed by memory: `size` less the arena's decommitted holes.
    fn committed(&self) -> u64 {
        self.size - self.holes.as_ref().map_or(0, Holes::decommitted)
    }

    /// The request class a regular block serves.
    fn class(&self) -> Option<Class> {
        match self.role {
            Role::Class(c) => Some(c),
            Role::Arena { .. } | Role::Expandable { .. } => None,
        }
    }

    /// Address space reserved, for the arena and an expandable allocation's block.
    fn reserved(&self) -> Option<u64> {
        match self.role {
            Role::Class(_) => None,
            Role::Arena { reserved } | Role::Expandable { reserved } => Some(reserved),
        }
    }
}

struct Live {
    block: usize,
    /// The sub-allocated region; its size is the request rounded to the copy alignment.
    region: Region,
    label: String,
    last_use: Ticket,
    /// Whether the block was reserved for this allocation (a cancel returns it).
    fresh_block: bool,
    /// Bytes the arena grew in place for this allocation (a cancel gives them back).
    grown: u64,
}

struct State {
    /// `None` entries are blocks returned by trim; indices stay stable for `Live::block`.
    blocks: Vec<Option<Block>>,
    slots: Slots<Live>,
    /// Frees waiting for a ticket: block index, region, the freed handle (for the listener).
    deferred: Deferred<(usize, Region, Handle)>,
    stats: PoolStats,
    /// Set by the first backend call that reported the device lost (backend, detail); every later
    /// allocate fails with [`Error::DeviceLost`].
    lost: Option<(&'static str, String)>,
    /// Index in `blocks` of the arena that grows in place, while it is reserved.
    arena: Option<usize>,
}

/// A place found for a request.
struct Carved {
    block: usize,
    region: Region,
    /// Whether the block was reserved for this request.
    fresh_block: bool,
    /// Bytes the arena grew in place for this request.
    grown: u64,
}

impl Carved {
    fn existing((block, region): (usize, Region)) -> Self {
        Carved {
            block,
            region,
            fresh_block: false,
            grown: 0,
        }
    }
}

/// A pool of blocks of one memory kind, sub-allocated with TLSF. `Send + Sync`; all methods take
/// `&self` and serialise on one internal lock (sub-allocation is tens of nanoseconds).
pub struct ArenaPool {
    backend: Arc<dyn Backend>,
    config: ArenaConfig,
    /// Alignment every allocation gets at least: the binding alignment for device memory, the copy
    /// alignment otherwise.
    base_align: u64,
    copy_align: u64,
    /// How the backend grows blocks in place, when it does and the configuration allows it.
    growth: Option<InPlaceGrowth>,
    budget: Arc<Budget>,
    /// Whether `budget` is shared with other pools (else its reservations are exactly this pool's).
    shared_budget: bool,
    /// Whether `listener` is set: block events skip the lock when it is not.
    heard: AtomicBool,
    listener: RwLock<Option<Arc<dyn PoolListener>>>,
    state: Mutex<State>,
}

impl ArenaPool {
    /// Creates an empty pool with a budget of its own (`config.budget`, else the backend's reported
    /// budget for device memory); no block is reserved until the first allocation.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for a zero block size.
    pub fn new(backend: Arc<dyn Backend>, config: ArenaConfig) -> Result<Self> {
        let limit = match (config.budget, config.kind) {
            (Some(b), _) => Some(b),
            (None, MemoryKind::DeviceLocal | MemoryKind::Managed) => backend.capabilities().budget,
            (None, _) => None,
        };
        Self::build(backend, config, Budget::new(limit), false)
    }

    /// Creates an empty pool whose blocks are reserved against `budget`, shared with the other
    /// pools of a runtime; `config.budget` is not used.
    ///
    /// # Errors
    /// As [`ArenaPool::new`].
    pub fn with_budget(
        backend: Arc<dyn Backend>,
        config: ArenaConfig,
        budget: Arc<Budget>,
    ) -> Result<Self> {
        Self::build(backend, config, budget, true)
    }

    fn build(
        backend: Arc<dyn Backend>,
        mut config: ArenaConfig,
        budget: Arc<Budget>,
        shared_budget: bool,
    ) -> Result<Self> {
        let caps = backend.capabilities();
        if config.block_size == 0 {
            return Err(Error::ZeroSize { what: "block size" });
        }
        config.block_size = config.block_size.min(caps.max_block_size);
        config.budget = budget.limit();
        let copy_align = caps.copy_align.max(1).next_power_of_two();
        let base_align = match config.kind {
            MemoryKind::DeviceLocal | MemoryKind::Managed => {
                caps.binding_align.max(1).next_power_of_two()
            }
            _ => 1,
        }
        .max(copy_align);
        let growth = backend
            .growable()
            .map(|g| g.in_place_growth())
            .filter(|g| Carver::grows_in_place(&config) && g.granularity.is_power_of_two());
        Ok(ArenaPool {
            growth,
            base_align,
            copy_align,
            budget,
            shared_budget,
            heard: AtomicBool::new(false),
            listener: RwLock::new(None),
            state: Mutex::new(State {
                blocks: Vec::new(),
                slots: Slots::new(next_pool_id(), "allocation"),
                deferred: Deferred::new(),
                stats: PoolStats::default(),
                lost: None,
                arena: None,
            }),
            backend,
            config,
        })
    }

    /// The pool's configuration (after clamping; `budget` is the limit in force).
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// The backend the pool draws blocks from.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The budget the pool reserves blocks against.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Alignment every allocation of this pool gets at least, in bytes.
    pub fn base_align(&self) -> u64 {
        self.base_align
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the listener, if one is installed.
    fn notify(&self, f: impl FnOnce(&dyn PoolListener)) {
        if self.heard.load(Ordering::Acquire) {
            let l = self.listener.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(l) = l.as_deref() {
                f(l);
            }
        }
    }

    /// Refuses with [`Error::DeviceLost`] once a backend call reported the device lost.
    fn check_alive(st: &State) -> Result<()> {
        match &st.lost {
            Some((backend, detail)) => Err(Error::DeviceLost {
                backend,
                detail: detail.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Passes a backend result through, remembering a lost device.
    fn remember_loss<T>(st: &mut State, r: Result<T>) -> Result<T> {
        if let Err(Error::DeviceLost { backend, detail }) = &r {
            st.lost.get_or_insert_with(|| (*backend, detail.clone()));
        }
        r
    }

    /// The request rounded to the copy alignment, and the alignment raised to the pool's base.
    pub(crate) fn check_request(&self, size: u64, align: u64) -> Result<(u64, u64)> {
        if size == 0 {
            return Err(Error::ZeroSize { what: "allocation" });
        }
        if align == 0 || !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(Error::InvalidAlignment {
                align,
                max: MAX_ALIGN,
            });
        }
        let limit = self.backend.capabilities().max_block_size;
        // Not `ok_or`: an error built on every request is dropped on every request.
        let Some(rounded) = align_up(size, self.copy_align).filter(|r| *r <= limit) else {
            return Err(Error::TooLarge {
                what: "allocation",
                requested: size,
                limit,
                limit_name: "largest block of the device",
            });
        };
        if let Some(budget) = self.budget.limit() {
            if rounded > budget {
                return Err(Error::TooLarge {
                    what: "allocation",
                    requested: size,
                    limit: budget,
                    limit_name: "pool budget",
                });
            }
        }
        Ok((rounded, align.max(self.base_align)))
    }

    /// Existing blocks, then completed frees, then pending frees where growth would pass the
    /// allowance ([`pending`]), then (after returning idle blocks) growth in place, then a new
    /// block.
    fn carve(&self, st: &mut State, size: u64, align: u64, label: &str) -> Result<Option<Carved>> {
        for attempt in 0..2 {
            if attempt == 1 {
                if st.deferred.bytes() == 0 {
                    break;
                }
                self.reclaim_locked(st)?;
            }
            if let Some(found) = self.try_arena(st, size, align)? {
                return Ok(Some(Carved::existing(found)));
            }
            if let Some(found) = Self::try_existing(st, size, align)? {
                return Ok(Some(Carved::existing(found)));
            }
        }
        if let Some(found) = self.after_pending_frees(st, size, align)? {
            return Ok(Some(Carved::existing(found)));
        }
        self.release_idle(st);
        if let Some(found) = self.grow_in_place(st, size, align, label)? {
            return Ok(Some(found));
        }
        Ok(self.grow(st, size, align, label)?.map(|found| Carved {
            fresh_block: true,
            ..Carved::existing(found)
        }))
    }

    fn block_id(st: &State, block: usize) -> Result<BlockId> {
        st.blocks
            .get(block)
            .and_then(Option::as_ref)
            .map(|b| b.id)
            .ok_or_else(|| {
                Error::invariant("an allocation's block is live", format!("block {block}"))
            })
    }

    /// Returns a region to its block's TLSF and tells the listener.
    fn release(&self, st: &mut State, block: usize, region: Region, handle: Handle) -> Result<()> {
        match st.blocks.get_mut(block).and_then(Option::as_mut) {
            Some(b) => {
                let freed = (region.offset, region.size);
                let merged = b.carving.free_merged(region)?;
                if let Some(h) = b.holes.as_mut() {
                    h.freed_region(freed, merged);
                }
                if b.carving.is_empty() {
                    b.idle_since = Some(Instant::now());
                }
                let gone = b.carving.is_empty() && Self::is_expandable(st, block);
                Self::unplaced(st, freed.1);
                if gone {
                    // An expandable allocation's reservation serves nothing else.
                    self.release_block(st, block)?;
                }
            }
            None => {
                return Err(Error::invariant(
                    "an allocation's block is live",
                    format!("block {block}"),
                ));
            }
        }
        self.notify(|l| l.reclaimed(handle));
        Ok(())
    }

    fn reclaim_locked(&self, st: &mut State) -> Result<()> {
        if st.deferred.bytes() == 0 {
            return Ok(());
        }
        let completed = Self::remember_loss(st, self.backend.completed())?;
        for (block, region, handle) in st.deferred.reclaim(completed) {
            self.release(st, block, region, handle)?;
        }
        st.stats.pending_free = st.deferred.bytes();
        Ok(())
    }

    /// Returns one empty block to the backend; on failure the block stays in the pool.
    fn release_block(&self, st: &mut State, index: usize) -> Result<u64> {
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return Ok(0);
        };
        let (id, size) = (b.id, b.committed());
        Self::remember_loss(st, self.backend.free_block(id))?;
        st.blocks[index] = None;
        if st.arena == Some(index) {
            st.arena = None;
        }
        self.budget.release(size);
        st.stats.reserved -= size;
        st.stats.blocks -= 1;
        st.stats.blocks_freed += 1;
        self.notify(|l| l.block_released(&self.config.name, id, size));
        Ok(size)
    }

    /// Returns blocks empty for at least [`ArenaConfig::idle_release`] (on a miss, before the
    /// pool grows). A block the backend refuses to take back stays.
    fn release_idle(&self, st: &mut State) {
        let Some(idle) = self.config.idle_release else {
            return;
        };
        for i in 0..st.blocks.len() {
            let expired = st.blocks[i].as_ref().is_some_and(|b| {
                b.carving.is_empty() && b.idle_since.is_some_and(|t| t.elapsed() >= idle)
            });
            if expired {
                let _ = self.release_block(st, i);
            }
        }
    }

    fn trim_locked(&self, st: &mut State) -> Result<u64> {
        self.reclaim_locked(st)?;
        // Blocks with pending frees are not empty in their TLSF, so they are kept.
        let mut released = 0;
        for i in 0..st.blocks.len() {
            if st.blocks[i].as_ref().is_some_and(|b| b.carving.is_empty()) {
                released += self.release_block(st, i)?;
            }
        }
        if let Some(i) = st.arena {
            released += self.release_spare(st, i, u64::MAX, u64::MAX)?;
        }
        Ok(released + self.shrink_arena(st, u64::MAX)?)
    }
}

#[cfg(test)]
mod tests;
