//! The arena that grows in place, on the host's reserve-and-commit: one block whatever the
//! growth, committed bytes that follow the live set, trim and cancel that give bytes back, and
//! the fallback to blocks when the reservation is full.

use std::sync::Arc;

use super::*;
use crate::backend::{Backend, BlockDesc, BlockId, Growable};
use crate::host::{HostBackend, HostConfig};
use crate::pool::ArenaPool;
use crate::pool::arena::testing::granularity;
use crate::pool::{ArenaConfig, DevicePool, PoolStats};
use crate::test_adaptors::host_adaptor;

/// A pool that grows in place at its end only (holes are tested in `holes/tests.rs`).
fn pool(config: HostConfig) -> (Arc<HostBackend>, ArenaPool, u64) {
    let backend = Arc::new(HostBackend::new(config).unwrap());
    let page = granularity(backend.as_ref());
    let config = ArenaConfig {
        holes: false,
        ..ArenaConfig::device()
    };
    let p = ArenaPool::new(backend.clone(), config).unwrap();
    (backend, p, page)
}

#[test]
fn growth_by_deficit_and_step_is_rounded_to_the_granularity() {
    let mib = 1 << 20;
    // Small deficit in a large arena: the step (1/32 of 64 MiB = 2 MiB).
    assert_eq!(growth_bytes(1000, 64 * mib, 4096, u64::MAX), Some(2 * mib));
    // A large deficit: itself, rounded to the granularity.
    assert_eq!(
        growth_bytes(5 * mib + 1, 64 * mib, 2 * mib, u64::MAX),
        Some(6 * mib)
    );
    // Not enough room for the step: the deficit alone; not even that: refused.
    assert_eq!(growth_bytes(1000, 64 * mib, 4096, mib), Some(4096));
    assert_eq!(growth_bytes(1000, 64 * mib, 4096, 4095), None);
    assert_eq!(
        growth_bytes(u64::MAX, 0, 4096, u64::MAX),
        None,
        "rounding overflows"
    );
}

#[test]
fn one_block_grows_with_the_live_set_and_keeps_contents() {
    let (backend, p, page) = pool(HostConfig::default());
    let first = p.allocate(1000, 1, "first").unwrap();
    backend
        .write_mapped(first.range.block, first.range.offset, &[9u8; 1000])
        .unwrap();
    assert_eq!(
        p.stats().reserved,
        page,
        "the first commit is the request, rounded"
    );
    let mut live = vec![];
    let mut bytes = 1000;
    for i in 1..200u64 {
        let size = (i * 7919) % 300_000 + 1;
        let a = p.allocate(size, 256, "grow").unwrap();
        assert_eq!(
            a.range.block, first.range.block,
            "everything lives in the one arena"
        );
        bytes += a.range.size;
        live.push(a);
        p.check_invariants().unwrap();
    }
    let s = p.stats();
    assert_eq!((s.blocks, backend.block_count()), (1, 1));
    assert_eq!(
        s.reserved,
        backend.block_bytes(),
        "the pool reports what the host committed"
    );
    // Filling up, the arena holds the live bytes plus alignment, one growth step and a page.
    assert!(
        s.reserved <= bytes + bytes / 32 + 200 * 256 + 2 * page,
        "{} for {bytes}",
        s.reserved
    );
    let mut out = [0u8; 1000];
    backend
        .read_mapped(first.range.block, first.range.offset, &mut out)
        .unwrap();
    assert_eq!(out, [9u8; 1000], "growth never moves a tensor");
    for a in live {
        p.free(a.handle).unwrap();
    }
    p.free(first.handle).unwrap();
    assert_eq!(p.trim().unwrap(), s.reserved);
    assert_eq!((backend.block_count(), p.stats().reserved), (0, 0));
}

#[test]
fn trim_decommits_the_free_tail_under_live_tensors() {
    let (backend, p, page) = pool(HostConfig::default());
    let a = p.allocate(3 * page, 1, "a").unwrap();
    let b = p.allocate(40 * page, 1, "b").unwrap();
    assert_eq!(p.stats().reserved, 43 * page);
    p.free(b.handle).unwrap();
    assert_eq!(p.trim().unwrap(), 40 * page);
    assert_eq!(
        (p.stats().reserved, backend.block_bytes()),
        (3 * page, 3 * page)
    );
    // The arena grows again in place, in the same block.
    let c = p.allocate(10 * page, 1, "c").unwrap();
    assert_eq!((c.range.block, c.range.offset), (a.range.block, 3 * page));
    p.free(c.handle).unwrap();
    p.free(a.handle).unwrap();
    p.check_invariants().unwrap();
    // Empty: the whole reservation goes back.
    assert_eq!(p.trim().unwrap(), 13 * page);
    assert_eq!(backend.block_count(), 0);
    p.check_invariants().unwrap();
}

/// A cancelled allocation leaves the pool as before, including what the arena grew for it.
#[test]
fn cancel_gives_back_the_growth() {
    let (_backend, p, page) = pool(HostConfig::default());
    let keep = p.allocate(page, 1, "keep").unwrap();
    let before = p.stats();
    let grown = p.allocate(100 * page, 1, "grows the arena").unwrap();
    assert_eq!(p.stats().reserved, 101 * page);
    p.cancel(grown.handle).unwrap();
    assert_eq!(
        p.stats(),
        PoolStats {
            peak_in_use: p.stats().peak_in_use,
            peak_reserved: p.stats().peak_reserved,
            ..before
        }
    );
    p.free(keep.handle).unwrap();
    p.check_invariants().unwrap();
}

#[test]
fn a_full_reservation_falls_back_to_blocks_and_the_budget_binds_commits() {
    let mib = 1 << 20;
    // The host reserves at most its largest block: 1 MiB here.
    let (backend, p, _) = pool(HostConfig {
        max_block_size: mib,
        ..HostConfig::default()
    });
    let a = p.allocate(600 << 10, 1, "a").unwrap();
    let b = p.allocate(600 << 10, 1, "b").unwrap();
    assert_ne!(
        a.range.block, b.range.block,
        "b needs a block beside the full arena"
    );
    assert_eq!(backend.block_count(), 2);
    p.check_invariants().unwrap();
    for h in [a, b] {
        p.free(h.handle).unwrap();
    }
    // A budget caps committed bytes: the arena grows up to it, then the pool is out of memory.
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let p = ArenaPool::new(
        backend.clone(),
        ArenaConfig {
            budget: Some(2 * mib),
            ..ArenaConfig::device()
        },
    )
    .unwrap();
    let x = p.allocate(mib, 1, "x").unwrap();
    let y = p.allocate(mib, 1, "y").unwrap();
    assert_eq!(x.range.block, y.range.block);
    assert!(matches!(
        p.allocate(1, 1, "z"),
        Err(crate::Error::OutOfMemory(_))
    ));
    assert_eq!(backend.block_bytes(), 2 * mib);
    p.free(x.handle).unwrap();
    p.free(y.handle).unwrap();
    p.check_invariants().unwrap();
}

/// Beside a full arena, the block pool issues handles of its own: the same slot as the arena's
/// first allocation, another pool. Frees, statistics and the counting adaptor above keep them
/// apart, and the peaks are the peaks of the sums.
#[test]
fn handles_of_the_arena_and_the_blocks_beside_it_stay_apart() {
    let mib = 1 << 20;
    let backend = Arc::new(
        HostBackend::new(HostConfig {
            max_block_size: mib,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let p = crate::pool::StatsPool::new(ArenaPool::new(backend, ArenaConfig::device()).unwrap());
    let a = p.allocate(600 << 10, 1, "a").unwrap();
    let b = p.allocate(500 << 10, 1, "b").unwrap();
    assert_eq!(
        a.handle.slot(),
        b.handle.slot(),
        "each bottom pool's first slot"
    );
    assert_ne!(a.handle, b.handle);
    assert_eq!(p.label(b.handle).unwrap(), "b");
    assert_eq!(p.allocation_stats().in_use, 1100 << 10);
    p.free(a.handle).unwrap();
    assert_eq!(
        p.allocation_stats().in_use,
        500 << 10,
        "only a's bytes went"
    );
    assert_eq!(p.resolve(b.handle).unwrap().size, 500 << 10);
    p.free(b.handle).unwrap();
    assert_eq!(p.allocation_stats().in_use, 0);
    let s = p.stats();
    assert_eq!((s.in_use, s.peak_in_use), (0, 1100 << 10));
    assert!(s.peak_reserved >= 1100 << 10 && s.peak_reserved <= 2 * mib);
    p.check_invariants().unwrap();
}

/// The host backend with growths that shrink whole, as CUDA's (each growth is one mapping): a
/// shrink keeps the growths that hold the new end.
struct WholeGrowths {
    host: HostBackend,
    /// Committed size after each growth of the one reserved block, ascending.
    ends: std::sync::Mutex<Vec<u64>>,
}

host_adaptor!(WholeGrowths, growable);

impl Growable for WholeGrowths {
    fn in_place_growth(&self) -> InPlaceGrowth {
        // CUDA without holes: each growth is one mapping.
        InPlaceGrowth {
            holes: false,
            ..self.host.in_place_growth()
        }
    }
    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        *self.ends.lock().unwrap() = vec![desc.size];
        self.host.reserve_block(desc, reserve)
    }
    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let mut ends = self.ends.lock().unwrap();
        let now = match ends.iter().position(|e| *e >= size) {
            Some(i) => {
                ends.truncate(i + 1);
                ends[i]
            }
            None => {
                ends.push(size);
                size
            }
        };
        self.host.resize_block(block, now)
    }
    fn decommit_range(&self, _: BlockId, _: u64, _: u64) -> Result<()> {
        Err(no_holes(self, "decommit_range"))
    }
    fn commit_range(&self, _: BlockId, _: u64, _: u64) -> Result<()> {
        Err(no_holes(self, "commit_range"))
    }
    fn remap_range(&self, _: BlockId, _: u64, _: u64, _: u64) -> Result<()> {
        Err(no_holes(self, "remap_range"))
    }
    fn extend_block(&self, _: BlockId, _: u64) -> Result<()> {
        Err(no_holes(self, "extend_block"))
    }
}

/// What [`WholeGrowths`] answers a hole call: it offers none.
fn no_holes(backend: &WholeGrowths, call: &str) -> crate::Error {
    crate::Error::Unsupported {
        backend: backend.capabilities().backend,
        what: format!("holes in blocks that grow in place ({call})"),
    }
}

/// A backend that returns growths whole (CUDA maps each growth as one allocation) may keep more
/// than a trim asks: the pool counts what it reports, through the validating front.
#[test]
fn trim_counts_what_a_backend_that_keeps_whole_growths_reports() {
    let host = HostBackend::new(HostConfig::default()).unwrap();
    let page = granularity(&host);
    let backend = Arc::new(crate::Validated::new(Arc::new(WholeGrowths {
        host,
        ends: std::sync::Mutex::new(Vec::new()),
    })));
    let p = ArenaPool::new(backend.clone(), ArenaConfig::device()).unwrap();
    let a = p.allocate(3 * page, 1, "a").unwrap();
    // One growth of 40 pages after the first 3.
    let b = p.allocate(40 * page, 1, "b").unwrap();
    assert_eq!(p.stats().reserved, 43 * page);
    // `c` lands at the start of the second growth, so the free tail is inside it: nothing can
    // go back.
    p.free(b.handle).unwrap();
    let c = p.allocate(page, 1, "c").unwrap();
    assert_eq!(c.range.offset, 3 * page);
    assert_eq!(p.trim().unwrap(), 0);
    assert_eq!(p.stats().reserved, 43 * page);
    p.check_invariants().unwrap();
    // With `c` gone the tail reaches back to the first growth's end: the second goes whole.
    p.free(c.handle).unwrap();
    assert_eq!(p.trim().unwrap(), 40 * page);
    assert_eq!(p.stats().reserved, 3 * page);
    p.check_invariants().unwrap();
    p.free(a.handle).unwrap();
    assert_eq!(p.trim().unwrap(), 3 * page);
    p.check_invariants().unwrap();
}
