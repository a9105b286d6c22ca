//! The arena pool on buddy ([`Carver::Buddy`]) on the host backend: blocks carved by buddy, no
//! arena that grows in place, requests placed, freed, merged and trimmed as on TLSF.

use std::sync::Arc;

use super::*;
use crate::host::{HostBackend, HostConfig};
use crate::pool::{ArenaPool, DevicePool};

fn buddy_pool() -> (Arc<HostBackend>, ArenaPool) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = ArenaConfig {
        block_size: 1 << 16,
        carver: Carver::Buddy,
        ..ArenaConfig::device()
    };
    let pool = ArenaPool::new(backend.clone(), config).unwrap();
    (backend, pool)
}

#[test]
fn the_default_is_tlsf_and_buddy_is_chosen_by_the_config() {
    assert_eq!(ArenaConfig::device().carver, Carver::Tlsf);
    assert_eq!(ArenaConfig::default().carver, Carver::Tlsf);
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let tlsf = ArenaPool::new(backend, ArenaConfig::device()).unwrap();
    let a = tlsf.allocate(1000, 1, "a").unwrap();
    {
        let st = tlsf
            .growing()
            .expect("the host grows TLSF's arena in place")
            .lock();
        assert!(st.blocks[0].is_some(), "the arena is reserved");
        assert!(
            st.blocks
                .iter()
                .flatten()
                .all(|b| matches!(b.carving, Carving::Tlsf(_)))
        );
    }
    tlsf.free(a.handle).unwrap();

    let (_backend, pool) = buddy_pool();
    let a = pool.allocate(1000, 1, "a").unwrap();
    {
        assert!(pool.growing().is_none(), "buddy never grows in place");
        let st = pool.block_pool().lock();
        let blocks: Vec<_> = st.blocks.iter().flatten().collect();
        assert_eq!(blocks.len(), 1);
        assert!(matches!(blocks[0].carving, Carving::Buddy(_)));
        // A 1000-byte request holds a 1024-byte buddy block.
        assert_eq!(blocks[0].carving.report().used, 1024);
    }
    pool.free(a.handle).unwrap();
    pool.check_invariants().unwrap();
}

#[test]
fn a_pool_on_buddy_places_disjoint_aligned_ranges_and_gives_everything_back() {
    let (backend, pool) = buddy_pool();
    let base = pool.base_align();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut live = Vec::new();
    for i in 0..600 {
        if next() % 3 == 0 && !live.is_empty() {
            let k = (next() % live.len() as u64) as usize;
            let a: crate::pool::Allocation = live.swap_remove(k);
            pool.free(a.handle).unwrap();
        } else {
            // Small tensors mostly, some past the 64 KiB block size (their own blocks).
            let size = 1 + next() % if i % 10 == 0 { 300_000 } else { 5_000 };
            let align = 1u64 << (next() % 10);
            let a = pool.allocate(size, align, "t").unwrap();
            assert_eq!(a.range.offset % align.max(base), 0);
            assert!(a.range.size >= size);
            live.push(a);
        }
        if i % 50 == 0 {
            pool.check_invariants().unwrap();
        }
    }
    // No two live ranges of a block overlap.
    let mut ranges: Vec<_> = live
        .iter()
        .map(|a| (a.range.block, a.range.offset, a.range.offset + a.range.size))
        .collect();
    ranges.sort_unstable_by_key(|r| (r.0.0, r.1));
    for w in ranges.windows(2) {
        assert!(
            w[0].0 != w[1].0 || w[0].2 <= w[1].1,
            "{:?} overlaps {:?}",
            w[0],
            w[1]
        );
    }
    {
        let st = pool.block_pool().lock();
        for b in st.blocks.iter().flatten() {
            assert!(matches!(b.carving, Carving::Buddy(_)));
            // Whatever the policy asked for, a block holds the next power of two of its first
            // request; the held bytes are at least the live ones.
            assert!(b.carving.report().used <= b.size);
        }
    }
    for a in live {
        pool.free(a.handle).unwrap();
    }
    pool.check_invariants().unwrap();
    let reserved = pool.stats().reserved;
    assert!(reserved > 0);
    assert_eq!(
        pool.trim().unwrap(),
        reserved,
        "every block is whole again and goes back"
    );
    assert_eq!(backend.block_count(), 0);
}

#[test]
fn a_request_past_the_block_size_gets_a_power_of_two_block() {
    let (_backend, pool) = buddy_pool();
    // 96 KiB + 1: the policy would size a block near the request; buddy needs 128 KiB.
    let a = pool.allocate((96 << 10) + 1, 1, "big").unwrap();
    let b = pool.allocate(100, 1, "small").unwrap();
    assert_ne!(
        a.range.block, b.range.block,
        "small and large classes stay apart"
    );
    {
        let st = pool.block_pool().lock();
        let big = st
            .blocks
            .iter()
            .flatten()
            .find(|b| b.id == a.range.block)
            .unwrap();
        assert!(big.size >= 128 << 10, "block of {} bytes", big.size);
    }
    pool.free(a.handle).unwrap();
    pool.free(b.handle).unwrap();
    pool.check_invariants().unwrap();
}

#[test]
fn the_tlsf_only_calls_answer_without_room_on_buddy() {
    let mut c = Carving::new(Carver::Buddy, 1 << 10, 16).unwrap();
    assert_eq!(c.free_tail(), 0);
    assert!(c.allocate_at(0, 16, 16, None).unwrap().is_none());
    assert!(c.allocate_at_end(16, 16).unwrap().is_none());
    assert!(c.grow(16).is_err());
    assert!(c.shrink(16).is_err());
    // A request beyond the block's largest power of two is "no room here", not an error.
    let mut odd = Carving::new(Carver::Buddy, 96, 16).unwrap();
    assert!(odd.allocate(65, 1).unwrap().is_none());
    assert!(odd.allocate(64, 1).unwrap().is_some());
    assert_eq!(Carver::Buddy.block_bytes(1000, 3000), Some(4096));
    assert_eq!(Carver::Buddy.block_bytes(1 << 20, 3000), Some(1 << 20));
    assert_eq!(Carver::Tlsf.block_bytes(1000, 3000), Some(1000));
}
