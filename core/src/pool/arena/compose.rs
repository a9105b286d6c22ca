//! [`DevicePool`] for [`ArenaPool`], the fallback composition of its bottom pools: allocation
//! through [`allocate_from`] over them in order, everything else forwarded to the pool whose
//! handle it is, and the queries summed.
//!
//! Peaks are the peaks of the sums, counted across the bottom pools ([`Totals`](super::totals)).

use std::sync::Arc;

use super::api::{Bottom, allocate_from};
use super::{ArenaPool, Bottoms};
use crate::Result;
use crate::backend::{BlockRange, Ticket};
use crate::pool::Expandable;
use crate::pool::budget::Reclaim;
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;

impl ArenaPool {
    /// The bottom pools, in the order a request tries them.
    fn all(&self) -> Vec<&dyn Bottom> {
        match &self.bottoms {
            Bottoms::Blocks(b) => vec![b],
            Bottoms::InPlace {
                arena,
                blocks,
                expandables,
            } => vec![arena, blocks, expandables],
        }
    }

    /// The pool that issued `handle` (the block pool for a handle of none, which refuses it
    /// with the error a foreign handle gets).
    fn owner(&self, handle: Handle) -> &dyn Bottom {
        match &self.bottoms {
            Bottoms::Blocks(b) => b,
            Bottoms::InPlace {
                arena,
                blocks,
                expandables,
            } => {
                if arena.owns(handle) {
                    arena
                } else if expandables.owns(handle) {
                    expandables
                } else {
                    blocks
                }
            }
        }
    }
}

impl DevicePool for ArenaPool {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let checked = self.check_request(size, align)?;
        match &self.bottoms {
            Bottoms::Blocks(b) => allocate_from(&[b], &self.budget, size, checked, label),
            Bottoms::InPlace { arena, blocks, .. } => {
                allocate_from(&[arena, blocks], &self.budget, size, checked, label)
            }
        }
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.owner(handle).free_after(handle, ticket)
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        self.owner(handle).cancel(handle)
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        self.owner(handle).resolve(handle)
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.owner(handle).mark_used(handle, ticket)
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        self.owner(handle).last_use(handle)
    }

    fn label(&self, handle: Handle) -> Result<String> {
        self.owner(handle).label(handle)
    }

    fn reclaim(&self) -> Result<()> {
        self.all().iter().try_for_each(|b| b.reclaim())
    }

    fn trim(&self) -> Result<u64> {
        self.all().iter().try_fold(0, |sum, b| Ok(sum + b.trim()?))
    }

    fn stats(&self) -> PoolStats {
        let sums = self
            .all()
            .iter()
            .map(|b| b.stats())
            .reduce(|a, b| PoolStats {
                in_use: a.in_use + b.in_use,
                peak_in_use: a.peak_in_use + b.peak_in_use,
                reserved: a.reserved + b.reserved,
                peak_reserved: a.peak_reserved + b.peak_reserved,
                allocations: a.allocations + b.allocations,
                total_allocations: a.total_allocations + b.total_allocations,
                total_frees: a.total_frees + b.total_frees,
                blocks: a.blocks + b.blocks,
                blocks_allocated: a.blocks_allocated + b.blocks_allocated,
                blocks_freed: a.blocks_freed + b.blocks_freed,
                pending_free: a.pending_free + b.pending_free,
                oom_count: a.oom_count + b.oom_count,
            })
            .unwrap_or_default();
        self.totals.peaks(sums)
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        self.all()
            .iter()
            .flat_map(|b| b.live_allocations())
            .collect()
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        for b in self.all() {
            b.set_listener(listener.clone());
        }
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut reserved = 0;
        for b in self.all() {
            b.check_invariants()?;
            reserved += b.stats().reserved;
        }
        let charged = self.budget.reserved();
        if (self.shared_budget && charged < reserved)
            || (!self.shared_budget && charged != reserved)
        {
            return Err(format!("budget holds {charged} for {reserved} reserved"));
        }
        Ok(())
    }

    fn expandable(&self) -> Option<&dyn Expandable> {
        match &self.bottoms {
            Bottoms::Blocks(_) => None,
            Bottoms::InPlace { expandables, .. } => expandables.expandable(),
        }
    }
}

impl Reclaim for ArenaPool {
    fn release_idle(&self) -> Result<u64> {
        self.trim()
    }
}
