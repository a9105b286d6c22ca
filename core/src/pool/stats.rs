//! The statistics adaptor: counts what callers ask of the pool below (RMM's
//! `statistics_resource_adaptor`, PyTorch's `memory_stats`): bytes requested and handed out, now
//! and at peak, allocations made, freed and refused.
//!
//! A bottom pool keeps the counters it needs to work (reserved bytes for the budget, its blocks,
//! in-use bytes for the out-of-memory report; [`DevicePool::stats`], which this adaptor passes
//! through). What only a caller's view shows lives here: the bytes *requested* before rounding and
//! guard margins (their difference to `in_use` is internal waste), peaks that can be reset to
//! measure one phase ([`StatsPool::reset_peaks`]), and refused requests. A stack without this
//! adaptor pays nothing; with it, one uncontended lock per allocation and one per free (about a
//! quarter more per allocate+free pair than the bare arena in the pool bench, which is why it is
//! off by default).

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::backend::Ticket;
use crate::pool::device_pool::{self, Allocation, DevicePool};
use crate::pool::slots::Handle;
use crate::pool::{Expandable, ExpandableDesc};
use crate::{Error, Result};

/// Counters of a [`StatsPool`]: the callers' view of the pool below. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocationStats {
    /// Bytes requested by the live allocations (sizes as asked, before rounding and margins).
    pub requested: u64,
    /// Highest `requested` since creation or the last [`StatsPool::reset_peaks`].
    pub peak_requested: u64,
    /// Bytes handed out to the live allocations (sizes as the pool below returned them).
    pub in_use: u64,
    /// Highest `in_use` since creation or the last [`StatsPool::reset_peaks`].
    pub peak_in_use: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Highest `allocations` since creation or the last [`StatsPool::reset_peaks`].
    pub peak_allocations: u64,
    /// Allocations made since creation (cancelled ones excluded).
    pub total_allocations: u64,
    /// Bytes requested by all allocations made since creation (cancelled ones excluded).
    pub total_requested: u64,
    /// Frees since creation (counted when requested, even if the bytes wait for device work).
    pub total_frees: u64,
    /// Allocations refused for any reason, out-of-memory included.
    pub failed_allocations: u64,
    /// Allocations refused with [`Error::OutOfMemory`] (retryable).
    pub out_of_memory: u64,
}

/// What one live allocation counts for.
#[derive(Copy, Clone, Debug, Default)]
struct Counted {
    /// The handle's generation; 0 for a slot with no live allocation (live generations are odd).
    generation: u32,
    requested: u64,
    handed: u64,
}

struct Counters {
    stats: AllocationStats,
    /// Per pool that issued handles (a composed pool's bottom pools each issue their own), the
    /// counts indexed by handle slot. Handles are issued by the crate's slot tables only, whose
    /// indices are dense (at most the live allocations at peak), so each table stays as small as
    /// its pool's own; the pools are few (at most three), so finding one is a short scan.
    live: Vec<(u32, Vec<Counted>)>,
}

impl Counters {
    /// The entry of `handle`'s slot, made where it is new.
    fn slot(&mut self, handle: Handle) -> &mut Counted {
        let i = match self.live.iter().position(|(p, _)| *p == handle.pool()) {
            Some(i) => i,
            None => {
                self.live.push((handle.pool(), Vec::new()));
                self.live.len() - 1
            }
        };
        let table = &mut self.live[i].1;
        let slot = handle.slot() as usize;
        if table.len() <= slot {
            table.resize(slot + 1, Counted::default());
        }
        &mut table[slot]
    }

    /// The entry of live `handle`, where it was counted.
    fn live(&mut self, handle: Handle) -> Option<&mut Counted> {
        self.live
            .iter_mut()
            .find(|(p, _)| *p == handle.pool())?
            .1
            .get_mut(handle.slot() as usize)
            .filter(|c| c.generation == handle.generation() && c.generation != 0)
    }
}

/// Counts the allocations of the pool below. See the module doc.
pub struct StatsPool<P> {
    inner: P,
    counters: Mutex<Counters>,
}

impl<P: DevicePool> StatsPool<P> {
    /// Counts the allocations of `inner` made from now on.
    pub fn new(inner: P) -> Self {
        StatsPool {
            inner,
            counters: Mutex::new(Counters {
                stats: AllocationStats::default(),
                live: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counters now.
    pub fn allocation_stats(&self) -> AllocationStats {
        self.lock().stats.clone()
    }

    /// Sets every peak to its current value, so the next reading shows the peak of what runs in
    /// between (one phase, one model run).
    pub fn reset_peaks(&self) {
        let s = &mut self.lock().stats;
        s.peak_requested = s.requested;
        s.peak_in_use = s.in_use;
        s.peak_allocations = s.allocations;
    }

    /// Counts an allocation of `size` requested bytes (or its refusal).
    fn count(&self, size: u64, result: Result<Allocation>) -> Result<Allocation> {
        let mut k = self.lock();
        let a = match result {
            Ok(a) => a,
            Err(e) => {
                k.stats.failed_allocations += 1;
                if matches!(e, Error::OutOfMemory(_)) {
                    k.stats.out_of_memory += 1;
                }
                return Err(e);
            }
        };
        *k.slot(a.handle) = Counted {
            generation: a.handle.generation(),
            requested: size,
            handed: a.range.size,
        };
        let s = &mut k.stats;
        s.requested += size;
        s.peak_requested = s.peak_requested.max(s.requested);
        s.in_use += a.range.size;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.allocations += 1;
        s.peak_allocations = s.peak_allocations.max(s.allocations);
        s.total_allocations += 1;
        s.total_requested = s.total_requested.saturating_add(size);
        Ok(a)
    }

    /// Runs `free` (the inner pool's free or cancel of `handle`) under the counters' lock, and
    /// uncounts the allocation when it went (`cancelled`: as if never made). One lock per free;
    /// holding it across the inner call cannot deadlock, because no pool calls back into an
    /// adaptor above it while freeing, and it keeps a slot that another thread reuses at once
    /// from being uncounted twice.
    fn release(
        &self,
        handle: Handle,
        cancelled: bool,
        free: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut k = self.lock();
        let result = free();
        // A guard's corruption report comes with the allocation freed.
        if !matches!(result, Ok(()) | Err(Error::Corruption(_))) {
            return result;
        }
        let Some(e) = k.live(handle) else {
            // Made before this adaptor was put on the stack: never counted.
            return result;
        };
        let c = std::mem::take(e);
        let s = &mut k.stats;
        s.requested -= c.requested;
        s.in_use -= c.handed;
        s.allocations -= 1;
        if cancelled {
            s.total_allocations -= 1;
            s.total_requested -= c.requested;
        } else {
            s.total_frees += 1;
        }
        result
    }
}

/// Allocating, freeing and cancelling are counted; the rest passes through.
impl<P: DevicePool> device_pool::PoolAdaptor for StatsPool<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        &self.inner
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        self.count(size, self.inner.allocate(size, align, label))
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.release(handle, false, || self.inner.free_after(handle, ticket))
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        self.release(handle, true, || self.inner.cancel(handle))
    }

    fn expandable(&self) -> Option<&dyn Expandable> {
        self.inner.expandable().map(|_| self as &dyn Expandable)
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner.check_invariants()?;
        let k = self.lock();
        let live: Vec<_> = k
            .live
            .iter()
            .flat_map(|(_, t)| t)
            .filter(|c| c.generation != 0)
            .collect();
        let s = &k.stats;
        let requested: u64 = live.iter().map(|c| c.requested).sum();
        let handed: u64 = live.iter().map(|c| c.handed).sum();
        if live.len() as u64 != s.allocations || requested != s.requested || handed != s.in_use {
            return Err(format!(
                "statistics count {} allocations of {} bytes ({} requested), the table {} of {} \
                 ({requested})",
                s.allocations,
                s.in_use,
                s.requested,
                live.len(),
                handed
            ));
        }
        if s.peak_requested < s.requested
            || s.peak_in_use < s.in_use
            || s.peak_allocations < s.allocations
        {
            return Err(format!(
                "a statistics peak is below its current value: {s:?}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

/// Expandable allocations are counted like any other, and their growth as more bytes handed out.
impl<P: DevicePool> Expandable for StatsPool<P> {
    fn allocate_expandable(&self, desc: &ExpandableDesc<'_>) -> Result<Option<Allocation>> {
        let Some(inner) = self.inner.expandable() else {
            return Ok(None);
        };
        match inner.allocate_expandable(desc) {
            Ok(Some(a)) => self.count(desc.size, Ok(a)).map(Some),
            other => other,
        }
    }

    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation> {
        let inner = self
            .inner
            .expandable()
            .ok_or_else(|| Error::invariant("an expandable pool below the statistics", "none"))?;
        let a = inner.expand(handle, size)?;
        let mut k = self.lock();
        let Some(c) = k.live(handle) else {
            return Ok(a);
        };
        let (requested, handed) = (size.max(c.requested), a.range.size.max(c.handed));
        let (more_requested, more_handed) = (requested - c.requested, handed - c.handed);
        (c.requested, c.handed) = (requested, handed);
        let s = &mut k.stats;
        s.requested += more_requested;
        s.peak_requested = s.peak_requested.max(s.requested);
        s.in_use += more_handed;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.total_requested = s.total_requested.saturating_add(more_requested);
        Ok(a)
    }
}
