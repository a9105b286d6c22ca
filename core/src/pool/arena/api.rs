//! [`DevicePool`] for [`ArenaPool`]: allocate (the out-of-memory path of the module doc),
//! free after a ticket, cancel, and the queries; plus the pressure hook and the drop that waits
//! for in-flight work.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::{ArenaPool, Carved, Live};
use crate::backend::{BlockRange, Ticket};
use crate::pool::budget::Reclaim;
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;
use crate::{Error, Result};

impl DevicePool for ArenaPool {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let (rounded, align) = self.check_request(size, align)?;
        let mut st = self.lock();
        Self::check_alive(&st)?;
        let mut found = self.carve(&mut st, rounded, align, label)?;
        if found.is_none() {
            // The pressure path: every pool of the runtime, this one included, releases its idle
            // blocks. Our lock is released so that pools (and this one) can be asked.
            drop(st);
            let released = self.budget.relieve(None)?;
            st = self.lock();
            if released > 0 {
                found = self.carve(&mut st, rounded, align, label)?;
            }
        }
        let Some(Carved {
            block,
            region,
            fresh_block,
            grown,
        }) = found
        else {
            st.stats.oom_count += 1;
            let snapshot = self.oom_snapshot(&st, size, rounded, align, label);
            drop(st);
            return Err(Error::OutOfMemory(Box::new(snapshot.explain())));
        };
        Self::placed(&mut st, block, &region, rounded, align);
        let range = BlockRange {
            block: Self::block_id(&st, block)?,
            offset: region.offset,
            size: rounded,
        };
        let handle = st.slots.insert(Live {
            block,
            region,
            label: label.to_string(),
            last_use: Ticket::DONE,
            fresh_block,
            grown,
        });
        let s = &mut st.stats;
        s.in_use += rounded;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.allocations += 1;
        s.total_allocations += 1;
        Ok(Allocation { handle, range })
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
        st.stats.in_use -= size;
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
        let size = live.region.size;
        st.stats.in_use -= size;
        st.stats.allocations -= 1;
        st.stats.total_allocations -= 1;
        let block = live.block;
        let expandable = Self::is_expandable(&st, block);
        self.release(&mut st, block, live.region, handle)?;
        if expandable && st.blocks[block].is_none() {
            // Its reservation went back with it: as if never reserved.
            st.stats.blocks_allocated -= 1;
            st.stats.blocks_freed -= 1;
        }
        let empty = st.blocks[block]
            .as_ref()
            .is_some_and(|b| b.carving.is_empty());
        if drained && live.fresh_block && empty && self.release_block(&mut st, block).is_ok() {
            // As if the block had never been reserved. (If the backend refused to take it back,
            // it stays as an idle block that the next trim returns.)
            st.stats.blocks_allocated -= 1;
            st.stats.blocks_freed -= 1;
        }
        if drained && live.grown > 0 && st.arena == Some(block) {
            // Give back what the arena grew for this allocation, as far as its tail is free
            // (if the backend refuses, the bytes stay committed until a trim).
            let _ = self.shrink_arena(&mut st, live.grown);
        }
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
        let mut l = self
            .listener
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        self.heard.store(listener.is_some(), Ordering::Release);
        *l = listener;
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.check_state(&self.lock())
    }

    fn expandable(&self) -> Option<&dyn crate::pool::Expandable> {
        self.growth.map(|_| self as &dyn crate::pool::Expandable)
    }
}

impl Reclaim for ArenaPool {
    fn release_idle(&self) -> Result<u64> {
        self.trim()
    }
}

impl Drop for ArenaPool {
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
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for b in st.blocks.iter_mut().filter_map(Option::take) {
            self.budget.release(b.committed());
            let _ = self.backend.free_block(b.id);
            if self.heard.load(Ordering::Acquire) {
                let l = self.listener.read().unwrap_or_else(PoisonError::into_inner);
                if let Some(l) = l.as_deref() {
                    l.block_released(&self.config.name, b.id, b.committed());
                }
            }
        }
    }
}
