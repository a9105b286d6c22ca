//! The statistics adaptor against a model of what it should count, over a host-backed arena, alone
//! and around (or under) guard margins.

use std::sync::Arc;

use super::*;
use crate::host::{HostBackend, HostConfig};
use crate::pool::{ArenaConfig, ArenaPool, Guarded};
use crate::{Backend, MemoryKind};

fn arena(budget: Option<u64>) -> (Arc<dyn Backend>, Arc<dyn DevicePool>) {
    let backend: Arc<dyn Backend> = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = ArenaConfig {
        block_size: 1 << 20,
        budget,
        ..ArenaConfig::device()
    };
    let pool = Arc::new(ArenaPool::new(backend.clone(), config).unwrap());
    (backend, pool)
}

#[test]
fn counts_requested_and_handed_bytes_with_peaks() {
    let (_, pool) = arena(None);
    let p = StatsPool::new(pool);
    let a = p.allocate(100, 1, "a").unwrap();
    let b = p.allocate(1000, 256, "b").unwrap();
    let s = p.allocation_stats();
    assert_eq!(s.requested, 1100);
    assert_eq!(s.in_use, a.range.size + b.range.size);
    assert!(s.in_use >= s.requested, "{s:?}");
    assert_eq!((s.allocations, s.peak_allocations), (2, 2));
    p.check_invariants().unwrap();

    p.free(b.handle).unwrap();
    let s = p.allocation_stats();
    assert_eq!((s.requested, s.peak_requested), (100, 1100));
    assert_eq!(
        (s.allocations, s.total_allocations, s.total_frees),
        (1, 2, 1)
    );
    assert_eq!(s.total_requested, 1100);

    // A reset peak shows only what happens from then on.
    p.reset_peaks();
    let c = p.allocate(50, 1, "c").unwrap();
    p.free(c.handle).unwrap();
    let s = p.allocation_stats();
    assert_eq!(s.peak_requested, 150);
    assert_eq!(s.peak_allocations, 2);
    p.free(a.handle).unwrap();
    let s = p.allocation_stats();
    assert_eq!((s.requested, s.in_use, s.allocations), (0, 0, 0));
    p.check_invariants().unwrap();
}

#[test]
fn a_cancelled_allocation_was_never_made_and_refusals_are_counted() {
    let (_, pool) = arena(Some(1 << 20));
    let p = StatsPool::new(pool);
    let a = p.allocate(4096, 1, "undone").unwrap();
    p.cancel(a.handle).unwrap();
    let s = p.allocation_stats();
    assert_eq!(
        (s.allocations, s.total_allocations, s.total_requested),
        (0, 0, 0)
    );
    assert_eq!(s.total_frees, 0);
    // Peaks keep what was seen.
    assert_eq!(s.peak_requested, 4096);

    assert!(matches!(
        p.allocate(0, 1, "zero"),
        Err(Error::ZeroSize { .. })
    ));
    let _held = p.allocate(900 << 10, 1, "most").unwrap();
    assert!(matches!(
        p.allocate(900 << 10, 1, "no room"),
        Err(Error::OutOfMemory(_))
    ));
    let s = p.allocation_stats();
    assert_eq!((s.failed_allocations, s.out_of_memory), (2, 1));
    assert_eq!(s.allocations, 1);
    p.check_invariants().unwrap();
}

#[test]
fn a_refused_free_counts_nothing() {
    let (_, pool) = arena(None);
    let p = StatsPool::new(pool);
    let a = p.allocate(64, 1, "a").unwrap();
    p.free(a.handle).unwrap();
    let before = p.allocation_stats();
    assert!(matches!(p.free(a.handle), Err(Error::DoubleFree { .. })));
    assert!(matches!(p.cancel(a.handle), Err(Error::DoubleFree { .. })));
    assert_eq!(p.allocation_stats(), before);
    p.check_invariants().unwrap();
}

#[test]
fn allocations_made_before_the_adaptor_are_not_counted() {
    let (_, pool) = arena(None);
    let early = pool.allocate(64, 1, "early").unwrap();
    let p = StatsPool::new(pool);
    let late = p.allocate(32, 1, "late").unwrap();
    p.free(early.handle).unwrap();
    assert_eq!(p.allocation_stats().allocations, 1);
    p.free(late.handle).unwrap();
    let s = p.allocation_stats();
    assert_eq!((s.allocations, s.total_frees), (0, 1));
    p.check_invariants().unwrap();
}

/// Above guard margins the counters see the callers' bytes; below them, margins included.
#[test]
fn composes_with_guard_margins_either_way() {
    let (backend, pool) = arena(None);
    let above = StatsPool::new(Guarded::new(pool, backend, MemoryKind::DeviceLocal, 64).unwrap());
    let a = above.allocate(100, 1, "a").unwrap();
    assert_eq!(above.allocation_stats().in_use, a.range.size);
    above.free(a.handle).unwrap();
    above.check_invariants().unwrap();

    let (backend, pool) = arena(None);
    let below = Arc::new(StatsPool::new(pool));
    let guarded = Guarded::new(below.clone(), backend, MemoryKind::DeviceLocal, 64).unwrap();
    let a = guarded.allocate(100, 1, "a").unwrap();
    let s = below.allocation_stats();
    assert!(s.in_use >= a.range.size + 2 * 64, "{s:?}");
    assert_eq!(s.requested, s.in_use);
    guarded.free(a.handle).unwrap();
    assert_eq!(below.allocation_stats().in_use, 0);
    guarded.check_invariants().unwrap();
}

/// Frees and allocations from many threads reuse slots while others free: counts stay exact.
#[test]
fn counts_stay_exact_under_concurrent_slot_reuse() {
    let (_, pool) = arena(None);
    let p = Arc::new(StatsPool::new(pool));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let a = p.allocate(64 + (i + t) % 7 * 32, 1, "t").unwrap();
                    p.free(a.handle).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = p.allocation_stats();
    assert_eq!((s.allocations, s.requested, s.in_use), (0, 0, 0));
    assert_eq!((s.total_allocations, s.total_frees), (8000, 8000));
    p.check_invariants().unwrap();
}
