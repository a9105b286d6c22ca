//! [`DevicePool`] for every bottom pool ([`Carved`]): allocate through the stages of
//! [`Stage`], free after a ticket, cancel, and the queries; the [`Bottom`] face the arena pool
//! composes them through; and the drop that waits for in-flight work.

use std::sync::Arc;

use super::carved::{Carved, Kind, Live, Place, Stage};
use super::oom::OomSnapshot;
use crate::backend::{BlockRange, Ticket};
use crate::pool::budget::{Budget, Reclaim};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;
use crate::{Error, Result};

/// A bottom pool as the arena pool composes it: placement one stage at a time, so that every
/// pool is tried at a stage before any grows, and the parts of an out-of-memory report.
pub(super) trait Bottom: DevicePool {
    /// Places a request already checked (`size` rounded, `align` raised) at `stage`.
    fn place_at(
        &self,
        size: u64,
        align: u64,
        label: &str,
        stage: Stage,
    ) -> Result<Option<Allocation>>;

    /// The pool's part of an out-of-memory report for a request of `requested` bytes (`need`
    /// after rounding, at `align`).
    fn snapshot(&self, requested: u64, need: u64, align: u64, label: &str) -> OomSnapshot;

    /// Counts an out-of-memory error returned.
    fn count_oom(&self);
}

/// Allocates a checked request from the first of `bottoms` with room: each stage in every pool
/// before the next stage; then, after every pool of the runtime released its idle blocks
/// ([`Budget::relieve`]), once more; else [`Error::OutOfMemory`] with the report of all of
/// them (the planner runs with no lock held).
pub(super) fn allocate_from(
    bottoms: &[&dyn Bottom],
    budget: &Budget,
    requested: u64,
    (size, align): (u64, u64),
    label: &str,
) -> Result<Allocation> {
    for pass in 0..2 {
        if pass == 1 && budget.relieve(None)? == 0 {
            break;
        }
        for stage in Stage::ALL {
            for b in bottoms {
                if let Some(a) = b.place_at(size, align, label, stage)? {
                    return Ok(a);
                }
            }
        }
    }
    let snapshot = bottoms
        .iter()
        .map(|b| b.snapshot(requested, size, align, label))
        .reduce(OomSnapshot::merge);
    if let Some(first) = bottoms.first() {
        first.count_oom();
    }
    match snapshot {
        Some(s) => Err(Error::OutOfMemory(Box::new(s.explain()))),
        None => Err(Error::invariant("an arena pool has a bottom pool", "none")),
    }
}

impl<K: Kind> Bottom for Carved<K> {
    fn place_at(
        &self,
        size: u64,
        align: u64,
        label: &str,
        stage: Stage,
    ) -> Result<Option<Allocation>> {
        let mut st = self.lock();
        Self::check_alive(&st)?;
        let Some(Place {
            block,
            region,
            fresh_block,
            grown,
        }) = self.place(&mut st, size, align, label, stage)?
        else {
            return Ok(None);
        };
        K::placed(&mut st, block, &region, size, align);
        let range = BlockRange {
            block: Self::block_id(&st, block)?,
            offset: region.offset,
            size,
        };
        let handle = st.slots.insert(Live {
            block,
            region,
            label: label.to_string(),
            last_use: Ticket::DONE,
            fresh_block,
            grown,
        });
        self.count_in_use(&mut st.stats, size, 0);
        let s = &mut st.stats;
        s.allocations += 1;
        s.total_allocations += 1;
        Ok(Some(Allocation { handle, range }))
    }

    fn snapshot(&self, requested: u64, need: u64, align: u64, label: &str) -> OomSnapshot {
        self.oom_snapshot(&self.lock(), requested, need, align, label)
    }

    fn count_oom(&self) {
        self.lock().stats.oom_count += 1;
    }
}

impl<K: Kind> DevicePool for Carved<K> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let checked = self.check_request(size, align)?;
        allocate_from(&[self], &self.budget, size, checked, label)
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let backend = &self.backend;
        // Ask the backend before changing anything: if it fails, the allocation stays live.
        let removed = st.slots.remove_if(handle, |live| {
            let wait = ticket.max(live.last_use);
            Ok((wait, wait == Ticket::DONE || wait <= backend.completed()?))
        });
        let (live, (wait, done)) = Self::remember_loss(&mut st, removed)?;
        let size = live.region.size;
        self.count_in_use(&mut st.stats, 0, size);
        st.stats.allocations -= 1;
        st.stats.total_frees += 1;
        if done {
            self.release(&mut st, live.block, live.region, handle)?;
        } else {
            st.deferred
                .push(wait, size, (live.block, live.region, handle));
            st.stats.pending_free = st.deferred.bytes();
        }
        Ok(())
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        // Work the failed step queued before failing (a guard's staging copy, say) may still
        // target the region and its fresh block: let it finish before anything is released. A
        // block freed under a queued copy crashed lavapipe's worker. If the backend cannot say,
        // the region still returns but a fresh block stays reserved until a trim. On `wasm32`
        // submitting is enough: WebGPU keeps a destroyed buffer's memory until its work is done.
        let flushed = self.backend.flush();
        #[cfg(not(target_arch = "wasm32"))]
        let flushed = flushed.and_then(|t| self.backend.wait(t));
        let drained = flushed.is_ok();
        let mut st = self.lock();
        let live = st.slots.remove(handle)?;
        self.count_in_use(&mut st.stats, 0, live.region.size);
        st.stats.allocations -= 1;
        st.stats.total_allocations -= 1;
        let block = live.block;
        self.release(&mut st, block, live.region, handle)?;
        let gone = st.blocks[block].is_none();
        let empty = st.blocks[block]
            .as_ref()
            .is_some_and(|b| b.carving.is_empty());
        // A fresh block that went back (with its allocation, or here) is as if never reserved.
        // (If the backend refused to take it back, it stays as an idle block that the next trim
        // returns.)
        let returned = gone || (drained && empty && self.release_block(&mut st, block).is_ok());
        if live.fresh_block && returned {
            st.stats.blocks_allocated -= 1;
            st.stats.blocks_freed -= 1;
        }
        K::cancelled(self, &mut st, block, live.grown, drained);
        Ok(())
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let st = self.lock();
        let live = st.slots.get(handle)?;
        Ok(BlockRange {
            block: Self::block_id(&st, live.block)?,
            offset: live.region.offset,
            size: live.region.size,
        })
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let live = st.slots.get_mut(handle)?;
        live.last_use = live.last_use.max(ticket);
        Ok(())
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        Ok(self.lock().slots.get(handle)?.last_use)
    }

    fn label(&self, handle: Handle) -> Result<String> {
        Ok(self.lock().slots.get(handle)?.label.clone())
    }

    fn reclaim(&self) -> Result<()> {
        let mut st = self.lock();
        self.reclaim_locked(&mut st)
    }

    fn trim(&self) -> Result<u64> {
        let mut st = self.lock();
        self.trim_locked(&mut st)
    }

    fn stats(&self) -> PoolStats {
        let st = self.lock();
        let mut s = st.stats.clone();
        s.pending_free = st.deferred.bytes();
        s
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        let st = self.lock();
        LiveAllocation::all_in(&st.slots, |l| (&l.label, l.region.size))
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.listen(listener);
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.check_state(&self.lock())
    }

    fn expandable(&self) -> Option<&dyn crate::pool::Expandable> {
        K::expandable(self)
    }
}

impl<K: Kind> Reclaim for Carved<K> {
    fn release_idle(&self) -> Result<u64> {
        self.trim()
    }
}

impl<K: Kind> Drop for Carved<K> {
    fn drop(&mut self) {
        // Blocks may still be used by in-flight work: wait for everything before returning them.
        // When that wait fails (a timeout), the device may still read or write them: leak the
        // blocks (the backend reclaims them when it is destroyed) rather than free memory under
        // running work, which crashes drivers such as lavapipe. On `wasm32` there is no blocking
        // wait, and none is needed: WebGPU keeps a destroyed buffer's memory until its work is done.
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.backend.flush().and_then(|t| self.backend.wait(t)) {
            eprintln!(
                "tensormem: {} pool dropped while device work may still run ({e}); its blocks \
                 are left to the backend instead of freed",
                self.config.name
            );
            return;
        }
        let blocks: Vec<_> = self
            .state_mut()
            .blocks
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for b in blocks {
            self.budget.release(b.committed());
            let _ = self.backend.free_block(b.id);
            self.notify(|l| l.block_released(&self.config.name, b.id, b.committed()));
        }
    }
}
