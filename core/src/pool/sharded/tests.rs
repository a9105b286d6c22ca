use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::{HostBackend, HostConfig};

const MIB: u64 = 1 << 20;

fn host() -> Arc<dyn Backend> {
    Arc::new(HostBackend::new(HostConfig::default()).unwrap())
}

/// Shards of 1 MiB blocks (no in-place growth) under a budget of `budget` bytes.
fn pool(shards: usize, budget: Option<u64>) -> ShardedPool {
    let config = ArenaConfig {
        block_size: MIB,
        in_place: false,
        ..ArenaConfig::device()
    };
    ShardedPool::new(host(), config, Budget::new(budget), shards).unwrap()
}

fn shard_of(p: &ShardedPool, h: Handle) -> usize {
    p.ids.iter().position(|&id| id == h.pool()).unwrap()
}

#[test]
fn shard_counts_outside_1_to_max_are_refused() {
    for n in [0, MAX_SHARDS + 1] {
        let r = ShardedPool::new(host(), ArenaConfig::device(), Budget::new(None), n);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{n}");
    }
}

#[test]
fn a_thread_keeps_its_shard_and_frees_reach_the_owner_from_any_thread() {
    let p = Arc::new(pool(4, None));
    let a = p.allocate(1000, 256, "a").unwrap();
    let b = p.allocate(1000, 256, "b").unwrap();
    assert_eq!(shard_of(&p, a.handle), p.home());
    assert_eq!(shard_of(&p, b.handle), p.home());
    // Another thread frees them (tensors cross threads).
    let q = p.clone();
    std::thread::spawn(move || {
        q.free(a.handle).unwrap();
        q.free(b.handle).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(p.stats().allocations, 0);
    p.check_invariants().unwrap();
}

#[test]
fn a_full_home_shard_borrows_memory_another_shard_reserved() {
    // The budget holds one block: the 64 KiB an empty pool's first small block takes. Another
    // shard reserves it; this thread's shard cannot grow, the pressure path finds nothing idle,
    // and the request is served from the other shard's block, as one pool with the same budget
    // would serve it.
    let block = 64 << 10;
    let p = pool(2, Some(block));
    let other = (p.home() + 1) % 2;
    let held = p.shards()[other].allocate(16 << 10, 256, "held").unwrap();
    assert_eq!(p.stats().reserved, block);
    let a = p.allocate(16 << 10, 256, "borrowed").unwrap();
    assert_eq!(shard_of(&p, a.handle), other);
    // What no shard can serve is out of memory, explained by the home shard.
    match p.allocate(block, 256, "too much") {
        Err(Error::OutOfMemory(r)) => assert_eq!(r.requested, block),
        other => panic!("expected out of memory, got {other:?}"),
    }
    p.free(a.handle).unwrap();
    p.free(held.handle).unwrap();
    assert_eq!(p.trim().unwrap(), block);
    assert_eq!(p.stats().reserved, 0);
    p.check_invariants().unwrap();
}

#[test]
fn foreign_and_stale_handles_are_typed_errors() {
    let p = pool(2, None);
    let stranger = ArenaPool::new(host(), ArenaConfig::device()).unwrap();
    let h = stranger.allocate(64, 1, "x").unwrap().handle;
    assert!(matches!(p.free(h), Err(Error::ForeignHandle { .. })));
    assert!(matches!(p.resolve(h), Err(Error::ForeignHandle { .. })));
    stranger.free(h).unwrap();
    let a = p.allocate(64, 1, "y").unwrap();
    p.free(a.handle).unwrap();
    assert!(p.free(a.handle).is_err(), "double free");
    assert!(p.resolve(a.handle).is_err(), "use after free");
}

#[test]
fn stats_and_live_allocations_cover_every_shard() {
    let p = pool(2, None);
    let home = p.home();
    let a = p.allocate(1000, 256, "home").unwrap();
    let b = p.shards()[(home + 1) % 2]
        .allocate(3000, 256, "other")
        .unwrap();
    let s = p.stats();
    assert_eq!(s.allocations, 2);
    assert_eq!(s.in_use, 1000 + 3000);
    assert_eq!(s.blocks, 2);
    let mut labels: Vec<String> = p.live_allocations().into_iter().map(|l| l.label).collect();
    labels.sort();
    assert_eq!(labels, ["home", "other"]);
    assert_eq!(p.label(b.handle).unwrap(), "other");
    p.free(a.handle).unwrap();
    p.free(b.handle).unwrap();
}

/// Many threads allocate, hand allocations to other threads, and free: no two live allocations
/// overlap, every free reaches its shard, and every shard's invariants hold at the end.
#[test]
fn concurrent_allocations_never_overlap() {
    let p = Arc::new(pool(4, None));
    let threads = 8;
    let (tx, rx) = std::sync::mpsc::channel::<Allocation>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (p, tx, rx) = (p.clone(), tx.clone(), rx.clone());
            s.spawn(move || {
                let mut x = 0x2545_F491_4F6C_DD1Du64 ^ t;
                for _ in 0..300 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let a = p.allocate(64 << (x % 10), 256, "c").unwrap();
                    tx.send(a).unwrap();
                    // Free someone's allocation (maybe another thread's).
                    let theirs = rx.lock().unwrap().try_recv();
                    if let Ok(b) = theirs {
                        p.free(b.handle).unwrap();
                    }
                }
            });
        }
    });
    drop(tx);
    let live: Vec<Allocation> = rx.lock().unwrap().try_iter().collect();
    let mut by_block: HashMap<_, Vec<(u64, u64)>> = HashMap::new();
    for a in &live {
        let r = p.resolve(a.handle).unwrap();
        assert_eq!(r, a.range);
        by_block
            .entry(r.block)
            .or_default()
            .push((r.offset, r.offset + r.size));
    }
    for ranges in by_block.values_mut() {
        ranges.sort_unstable();
        assert!(
            ranges.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlap: {ranges:?}"
        );
    }
    assert_eq!(p.stats().allocations, live.len());
    for a in live {
        p.free(a.handle).unwrap();
    }
    p.check_invariants().unwrap();
    assert_eq!(p.stats().in_use, 0);
}
