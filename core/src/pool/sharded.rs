//! The arena pool sharded by thread: several [`ArenaPool`]s over one [`Budget`], each thread
//! allocating from its own shard, so threads that allocate at once do not queue on one lock.
//!
//! Why: an [`ArenaPool`] keeps its TLSF, slots and deferred frees under one mutex, so threads
//! that allocate at once queue on it; sharding is what the anchors do about that (mimalloc and
//! jemalloc give each thread its own heap or arena, PyTorch's caching allocator and RMM keep a
//! free list per stream).
//!
//! On two cores the one-lock stack and the sharded one scale alike (`docs/performance.md`, "Pool
//! threads"): two cores rarely find the lock held. The lock only becomes the limit with more
//! cores than that, so sharding stays off by default and this pool is there for many-core
//! servers, to be enabled after `cargo bench -p tensormem --bench pool_threads` shows the gain
//! on their hardware.
//!
//! How:
//! * A thread gets a shard on its first allocation, round-robin over the shards, and keeps it
//!   (threads are spread evenly; a thread never migrates, so its frees and reallocations reuse
//!   the same warm blocks).
//! * A free goes to the shard that issued the handle (its pool id), from any thread: tensors may
//!   be freed by another thread than the one that allocated them.
//! * When the thread's shard cannot serve a request (its blocks are full and the budget refuses
//!   growth), the other shards are tried before out of memory is reported, so sharding never
//!   fails a request that one pool with the same budget would serve from memory already reserved.
//!   The error reported is the thread's own shard's, with its full explanation.
//!
//! Cost: each shard reserves its own blocks, so up to `shards - 1` partly used blocks more than
//! one pool (on a GPU, 32 MiB each by default), and idle shards hold memory until a trim or the
//! pressure path. With the measurement above, that cost buys nothing on few cores: off by default
//! ([`PoolConfig::shards`](crate::PoolConfig::shards) = 1).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::backend::{Backend, BlockRange, Ticket};
use crate::pool::arena::{ArenaConfig, ArenaPool};
use crate::pool::budget::{Budget, Reclaim};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;
use crate::{Error, Result};

/// Most shards a pool may have: more than any core count it makes sense to split a lock over,
/// and few enough that a request that misses its shard can try the others.
pub const MAX_SHARDS: usize = 64;

/// Next shard ticket: thread `k` to ask gets shard `k % shards`.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's round-robin number, drawn on its first allocation from any sharded pool.
    static THREAD_TICKET: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread's round-robin number.
fn thread_ticket() -> usize {
    THREAD_TICKET.with(|t| match t.get() {
        Some(n) => n,
        None => {
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            t.set(Some(n));
            n
        }
    })
}

/// Arena pools, one per shard, over one budget. See the module doc.
///
/// Invariant: `ids[i]` is the pool id of `shards[i]`'s handles, all distinct.
pub struct ShardedPool {
    name: String,
    shards: Vec<Arc<ArenaPool>>,
    ids: Vec<u32>,
}

impl ShardedPool {
    /// `shards` arena pools of `config` reserving against `budget`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 shards or more than [`MAX_SHARDS`]; as
    /// [`ArenaPool::with_budget`].
    pub fn new(
        backend: Arc<dyn Backend>,
        config: ArenaConfig,
        budget: Arc<Budget>,
        shards: usize,
    ) -> Result<Self> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(Error::invalid(format!(
                "{shards} shards: a sharded pool has 1 to {MAX_SHARDS}"
            )));
        }
        let shards = (0..shards)
            .map(|_| {
                ArenaPool::with_budget(backend.clone(), config.clone(), budget.clone())
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ShardedPool {
            name: config.name,
            ids: shards.iter().map(|s| s.pool_id()).collect(),
            shards,
        })
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[Arc<ArenaPool>] {
        &self.shards
    }

    /// The shard this thread allocates from.
    fn home(&self) -> usize {
        thread_ticket() % self.shards.len()
    }

    /// The shard that issued `handle`.
    fn owner(&self, handle: Handle) -> Result<&ArenaPool> {
        match self.ids.iter().position(|&id| id == handle.pool()) {
            Some(i) => Ok(&self.shards[i]),
            None => Err(Error::ForeignHandle {
                what: "allocation",
                slot: handle.slot(),
                owner: "pool",
            }),
        }
    }

    /// Runs `f` on every shard, returning the first error after trying them all.
    fn each(&self, mut f: impl FnMut(&ArenaPool) -> Result<()>) -> Result<()> {
        let mut first = Ok(());
        for s in &self.shards {
            if let Err(e) = f(s) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl DevicePool for ShardedPool {
    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let home = self.home();
        let err = match self.shards[home].allocate(size, align, label) {
            Ok(a) => return Ok(a),
            Err(e @ Error::OutOfMemory(_)) => e,
            Err(e) => return Err(e),
        };
        for (i, shard) in self.shards.iter().enumerate() {
            if i != home
                && let Ok(a) = shard.allocate(size, align, label)
            {
                return Ok(a);
            }
        }
        Err(err)
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.owner(handle)?.free_after(handle, ticket)
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        self.owner(handle)?.cancel(handle)
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        self.owner(handle)?.resolve(handle)
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.owner(handle)?.mark_used(handle, ticket)
    }

    fn release(&self, handle: Handle) -> Result<()> {
        self.owner(handle)?.release(handle)
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        self.owner(handle)?.last_use(handle)
    }

    fn label(&self, handle: Handle) -> Result<String> {
        self.owner(handle)?.label(handle)
    }

    fn reclaim(&self) -> Result<()> {
        self.each(|s| s.reclaim())
    }

    fn trim(&self) -> Result<u64> {
        let mut released = 0;
        self.each(|s| {
            released += s.trim()?;
            Ok(())
        })?;
        Ok(released)
    }

    /// The shards' counters summed. Peaks are sums of each shard's peak: an upper bound of the
    /// pool's peak (shards need not peak together).
    fn stats(&self) -> PoolStats {
        let mut t = PoolStats::default();
        for s in self.shards.iter().map(|s| s.stats()) {
            t.in_use += s.in_use;
            t.peak_in_use += s.peak_in_use;
            t.reserved += s.reserved;
            t.peak_reserved += s.peak_reserved;
            t.allocations += s.allocations;
            t.total_allocations += s.total_allocations;
            t.total_frees += s.total_frees;
            t.blocks += s.blocks;
            t.blocks_allocated += s.blocks_allocated;
            t.blocks_freed += s.blocks_freed;
            t.pending_free += s.pending_free;
            t.oom_count += s.oom_count;
        }
        t
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        self.shards
            .iter()
            .flat_map(|s| s.live_allocations())
            .collect()
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        for s in &self.shards {
            s.set_listener(listener.clone());
        }
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut ids = self.ids.clone();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.shards.len() {
            return Err(format!("shard pool ids not distinct: {:?}", self.ids));
        }
        for (i, s) in self.shards.iter().enumerate() {
            s.check_invariants()
                .map_err(|e| format!("shard {i}: {e}"))?;
        }
        Ok(())
    }
}

impl Reclaim for ShardedPool {
    fn release_idle(&self) -> Result<u64> {
        self.trim()
    }
}

#[cfg(test)]
mod tests;
