//! Holes on the host's reserve-and-commit: a hole's memory goes back before the arena grows,
//! moves where a tensor lands on given-back granules, trim returns what is spare, contents of
//! live tensors never change, and the pool's committed bytes are the backend's.

use std::sync::Arc;

use super::*;
use crate::host::{HostBackend, HostConfig};
use crate::pool::arena::testing::{assert_holds, assert_offers_holes, churn, filled};
use crate::pool::{Allocation, ArenaConfig, ArenaPool, DevicePool};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn pool() -> (Arc<HostBackend>, ArenaPool) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    assert_offers_holes(&*backend);
    let p = ArenaPool::new(backend.clone(), ArenaConfig::device()).unwrap();
    (backend, p)
}

fn check(backend: &HostBackend, p: &ArenaPool) {
    p.check_invariants().unwrap();
    assert_eq!(
        p.stats().reserved,
        backend.block_bytes(),
        "pool and backend disagree"
    );
}

/// A pool whose arena holds a hole of `size` bytes (a freed tensor) between two live 64 KiB
/// tensors, filled with 1 and 3.
fn hole_between(size: u64) -> (Arc<HostBackend>, ArenaPool, Allocation, Allocation) {
    let (backend, p) = pool();
    let low = filled(&backend, &p, 64 * KIB, 1);
    let mid = filled(&backend, &p, size, 2);
    let high = filled(&backend, &p, 64 * KIB, 3);
    p.free(mid.handle).unwrap();
    (backend, p, low, high)
}

#[test]
fn a_hole_gives_its_memory_back_before_the_arena_grows() {
    let (backend, p, small, pin) = hole_between(4 * MIB);
    check(&backend, &p);
    // 6 MiB fits no hole: the arena grows, and the 4 MiB hole's memory goes back first.
    let bigger = filled(&backend, &p, 6 * MIB, 4);
    check(&backend, &p);
    let live = p.stats().in_use;
    let allowance = live + live / ALLOWANCE_DIVISOR + MIN_GRANULE;
    assert!(
        p.stats().reserved <= allowance,
        "{} committed for {live} live",
        p.stats().reserved
    );
    // Without holes the arena would hold the hole too.
    assert!(p.stats().reserved < 4 * MIB + 6 * MIB);
    for (a, byte) in [(&small, 1), (&pin, 3), (&bigger, 4)] {
        assert_holds(&backend, a, byte);
    }
    for a in [small, pin, bigger] {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!((backend.block_count(), p.stats().reserved), (0, 0));
}

#[test]
fn memory_moves_to_a_tensor_placed_on_a_given_back_hole() {
    let (backend, p, small, pin) = hole_between(4 * MIB);
    let bigger = filled(&backend, &p, 6 * MIB, 4);
    let decommitted = p.stats().reserved;
    // The 6 MiB tensor goes: its memory is spare. Tensors placed in the old hole, whose memory
    // went back, take it over: the arena commits nothing new.
    p.free(bigger.handle).unwrap();
    let mut again = Vec::new();
    for i in 0..3 {
        again.push(filled(&backend, &p, MIB + 4 * KIB, 10 + i));
        check(&backend, &p);
    }
    assert!(
        p.stats().reserved <= decommitted,
        "{} committed, {decommitted} before",
        p.stats().reserved
    );
    for (i, a) in again.iter().enumerate() {
        assert_holds(&backend, a, 10 + i as u8);
    }
    assert_holds(&backend, &small, 1);
    assert_holds(&backend, &pin, 3);
    for a in again.into_iter().chain([small, pin]) {
        p.free(a.handle).unwrap();
    }
    check(&backend, &p);
}

#[test]
fn trim_returns_spare_memory_inside_the_arena() {
    let (backend, p, low, high) = hole_between(8 * MIB);
    let before = p.stats().reserved;
    let released = p.trim().unwrap();
    check(&backend, &p);
    // The 8 MiB hole's whole granules go back; the two small tensors keep theirs.
    assert!(released >= 8 * MIB - 2 * MIN_GRANULE, "released {released}");
    assert_eq!(p.stats().reserved, before - released);
    assert_holds(&backend, &low, 1);
    assert_holds(&backend, &high, 3);
    // The hole takes a tensor again: its memory comes back.
    let refill = filled(&backend, &p, 4 * MIB, 5);
    check(&backend, &p);
    assert_holds(&backend, &refill, 5);
    for a in [low, high, refill] {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!(backend.block_count(), 0);
}

/// Churn with random sizes: the invariants hold after every step, the pool's committed bytes
/// are the backend's, and live contents never change.
#[test]
fn churn_keeps_contents_and_accounting() {
    let (backend, p) = pool();
    churn(&backend, &p, || check(&backend, &p));
    assert_eq!((backend.block_count(), p.stats().reserved), (0, 0));
}

#[test]
fn spare_granules_are_the_whole_committed_granules_of_free_space() {
    let mut h = Holes::new(64 * KIB, MIB, false);
    // Free space [100 KiB, 700 KiB): granules 2..10 are whole inside it.
    h.freed(100 * KIB, 600 * KIB);
    assert_eq!(h.spare.runs(0, 16, true).collect::<Vec<_>>(), vec![(2, 10)]);
    // A region touching granules 3..5 takes them.
    let (a, b) = h.taken(0, 1);
    assert_eq!(h.next_lacking(a, b), None, "everything is committed");
    h.spare.clear(3, 5);
    // Oldest first, at most what is asked, below the limit.
    assert_eq!(h.take_spare(2, 16), Some((2, 1)));
    assert_eq!(h.take_spare(2, 16), Some((5, 2)));
    assert_eq!(h.take_spare(100, 8), Some((7, 1)));
    assert_eq!(h.take_spare(100, 16), Some((8, 2)));
    assert_eq!(h.take_spare(1, 16), None);
}
