//! The statistics adaptor (RMM's `statistics_resource_adaptor`): counts what passes through its
//! layer of a stack — bytes asked for and bytes handed out, live and peak, allocations, frees,
//! out-of-memory and other failures — for any pool below it, including a user's pool that keeps
//! no counters of its own.
//!
//! The bottom pool's [`PoolStats`] say what the pool holds (reserved blocks, bytes in use with
//! margins and rounding); these say what the layer's callers asked for, so the difference is the
//! cost of everything below (rounding, alignment, guard margins). Counting is a few relaxed atomic
//! additions per call; a stack without the adaptor pays nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{BlockRange, Ticket};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;
use crate::{Error, Result};

/// What one layer of a stack has seen. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Bytes asked for by live allocations now (the requested sizes).
    pub requested: u64,
    /// Highest `requested` seen.
    pub peak_requested: u64,
    /// Bytes handed out for live allocations now (the sizes of the returned ranges).
    pub handed_out: u64,
    /// Live allocations now.
    pub allocations: u64,
    /// Highest `allocations` seen.
    pub peak_allocations: u64,
    /// Allocations made since creation.
    pub total_allocations: u64,
    /// Frees (and cancels) since creation.
    pub total_frees: u64,
    /// Allocate calls that failed with [`Error::OutOfMemory`].
    pub out_of_memory: u64,
    /// Other failed allocate and free calls.
    pub failures: u64,
}

#[derive(Default)]
struct Counters {
    requested: AtomicU64,
    peak_requested: AtomicU64,
    handed_out: AtomicU64,
    allocations: AtomicU64,
    peak_allocations: AtomicU64,
    total_allocations: AtomicU64,
    total_frees: AtomicU64,
    out_of_memory: AtomicU64,
    failures: AtomicU64,
}

/// Counts the calls through it. See the module doc.
pub struct Statistics<P> {
    inner: P,
    counters: Counters,
    /// Requested and handed-out sizes of live allocations, for their frees.
    sizes: std::sync::Mutex<std::collections::HashMap<Handle, (u64, u64)>>,
}

impl<P: DevicePool> Statistics<P> {
    /// Counts the calls to `inner`.
    pub fn new(inner: P) -> Self {
        Statistics {
            inner,
            counters: Counters::default(),
            sizes: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The counters now.
    pub fn layer_stats(&self) -> LayerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LayerStats {
            requested: get(&c.requested),
            peak_requested: get(&c.peak_requested),
            handed_out: get(&c.handed_out),
            allocations: get(&c.allocations),
            peak_allocations: get(&c.peak_allocations),
            total_allocations: get(&c.total_allocations),
            total_frees: get(&c.total_frees),
            out_of_memory: get(&c.out_of_memory),
            failures: get(&c.failures),
        }
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Handle, (u64, u64)>> {
        self.sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count_failure(&self, e: &Error) {
        let c = match e {
            Error::OutOfMemory(_) => &self.counters.out_of_memory,
            _ => &self.counters.failures,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a free of `handle` that succeeded.
    fn freed(&self, handle: Handle) {
        let c = &self.counters;
        if let Some((requested, handed_out)) = self.sizes().remove(&handle) {
            c.requested.fetch_sub(requested, Ordering::Relaxed);
            c.handed_out.fetch_sub(handed_out, Ordering::Relaxed);
            c.allocations.fetch_sub(1, Ordering::Relaxed);
        }
        c.total_frees.fetch_add(1, Ordering::Relaxed);
    }
}

impl<P: DevicePool> DevicePool for Statistics<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        match self.inner.allocate(size, align, label) {
            Ok(a) => {
                let c = &self.counters;
                self.sizes().insert(a.handle, (size, a.range.size));
                let now = c.requested.fetch_add(size, Ordering::Relaxed) + size;
                c.peak_requested.fetch_max(now, Ordering::Relaxed);
                c.handed_out.fetch_add(a.range.size, Ordering::Relaxed);
                let live = c.allocations.fetch_add(1, Ordering::Relaxed) + 1;
                c.peak_allocations.fetch_max(live, Ordering::Relaxed);
                c.total_allocations.fetch_add(1, Ordering::Relaxed);
                Ok(a)
            }
            Err(e) => {
                self.count_failure(&e);
                Err(e)
            }
        }
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let r = self.inner.free_after(handle, ticket);
        match &r {
            // A corruption report comes from a free that happened.
            Ok(()) | Err(Error::Corruption(_)) => self.freed(handle),
            Err(e) => self.count_failure(e),
        }
        r
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        let r = self.inner.cancel(handle);
        match &r {
            Ok(()) => self.freed(handle),
            Err(e) => self.count_failure(e),
        }
        r
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        self.inner.resolve(handle)
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.inner.mark_used(handle, ticket)
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        self.inner.last_use(handle)
    }

    fn label(&self, handle: Handle) -> Result<String> {
        self.inner.label(handle)
    }

    fn reclaim(&self) -> Result<()> {
        self.inner.reclaim()
    }

    fn trim(&self) -> Result<u64> {
        self.inner.trim()
    }

    fn stats(&self) -> PoolStats {
        self.inner.stats()
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        self.inner.live_allocations()
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.inner.set_listener(listener)
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner.check_invariants()?;
        let s = self.layer_stats();
        let tracked = self.sizes().len() as u64;
        if s.allocations != tracked || s.requested > s.handed_out {
            return Err(format!("layer statistics out of sync: {s:?}, {tracked} tracked"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostBackend, HostConfig};
    use crate::pool::{ArenaConfig, ArenaPool};

    #[test]
    fn counts_requests_against_what_the_pool_hands_out() {
        let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
        let budget = ArenaConfig {
            block_size: 1 << 16,
            budget: Some(1 << 16),
            ..ArenaConfig::device()
        };
        let p = Statistics::new(ArenaPool::new(backend, budget).unwrap());
        let a = p.allocate(5, 1, "a").unwrap();
        let b = p.allocate(1000, 1, "b").unwrap();
        let s = p.layer_stats();
        assert_eq!((s.requested, s.handed_out), (1005, 8 + 1000));
        assert_eq!((s.allocations, s.peak_allocations), (2, 2));
        assert!(matches!(
            p.allocate(1 << 16, 1, "too much"),
            Err(Error::OutOfMemory(_))
        ));
        assert!(matches!(p.allocate(0, 1, "zero"), Err(Error::ZeroSize { .. })));
        p.free(a.handle).unwrap();
        assert!(matches!(p.free(a.handle), Err(Error::DoubleFree { .. })));
        p.free(b.handle).unwrap();
        let s = p.layer_stats();
        assert_eq!(
            (s.requested, s.peak_requested, s.allocations, s.total_frees),
            (0, 1005, 0, 2)
        );
        assert_eq!((s.out_of_memory, s.failures), (1, 2));
        p.check_invariants().unwrap();
    }
}
