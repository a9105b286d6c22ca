//! Holes in a block that grows in place (`CudaDesc::vmm_holes`): whole units (physical
//! allocations) given back, moved (`cuMemUnmap` + `cuMemMap` of the same physical allocation)
//! and committed afresh stay usable for copies, a range that cuts a unit is refused, the
//! untouched granules keep their contents; and a pool over the validating front keeps a
//! tensor's contents while memory moves under it.

use std::sync::Arc;

use tensormem::{
    ArenaConfig, ArenaPool, Backend, BlockDesc, BlockId, DevicePool, Growable, MemoryKind,
    Validated,
};
use tensormem_cuda::CudaDesc;

use crate::{backend_with, range};

fn holes_backend() -> Option<tensormem_cuda::CudaBackend> {
    backend_with(&CudaDesc {
        vmm_holes: true,
        ..CudaDesc::default()
    })
}

/// Writes `byte` to `[offset, offset + 4096)` of `block` and reads it back through a readback
/// block; returns what was read.
fn round_trip(b: &dyn Backend, block: BlockId, offset: u64, byte: u8) -> Vec<u8> {
    if byte != 0 {
        b.write_queued(range(block, offset, 4096), &[byte; 4096])
            .unwrap()
            .expect("CUDA writes through its queue");
    }
    let down = b
        .alloc_block(&BlockDesc {
            kind: MemoryKind::Readback,
            size: 4096,
            label: "down",
        })
        .unwrap();
    let t = b
        .copy(range(block, offset, 4096), range(down, 0, 4096))
        .unwrap();
    b.wait(t).unwrap();
    let mut out = vec![0u8; 4096];
    b.read_mapped(down, 0, &mut out).unwrap();
    b.free_block(down).unwrap();
    out
}

#[test]
fn whole_units_are_given_back_moved_and_committed_again() {
    let Some(b) = holes_backend() else { return };
    let growth = b
        .extensions()
        .growable
        .expect("VMM on the device")
        .in_place_growth();
    assert!(growth.holes && growth.whole_units);
    let g = growth.granularity;
    // Units [0, g), [g, 2g) and [2g, 4g): the reservation's first size and two growths.
    let blk = b
        .reserve_block(
            &BlockDesc {
                kind: MemoryKind::DeviceLocal,
                size: g,
                label: "holes",
            },
            16 * g,
        )
        .unwrap();
    assert_eq!(b.resize_block(blk, 2 * g).unwrap(), 2 * g);
    assert_eq!(b.resize_block(blk, 4 * g).unwrap(), 4 * g);
    assert_eq!(round_trip(&b, blk, 0, 1), vec![1; 4096]);
    assert_eq!(round_trip(&b, blk, 3 * g, 3), vec![3; 4096]);
    // Part of a unit is refused, not a fault, and the unit keeps its memory.
    assert!(b.decommit_range(blk, 2 * g, g).is_err());
    assert_eq!(round_trip(&b, blk, 3 * g, 0), vec![3; 4096]);
    b.decommit_range(blk, g, g).unwrap();
    // The two-granule unit moves whole to a hole at the end: the same physical memory.
    assert_eq!(b.resize_block(blk, 6 * g).unwrap(), 6 * g);
    b.decommit_range(blk, 4 * g, 2 * g).unwrap();
    b.remap_range(blk, 2 * g, 4 * g, 2 * g).unwrap();
    assert_eq!(
        round_trip(&b, blk, 5 * g, 0),
        vec![3; 4096],
        "moved with its bytes"
    );
    assert_eq!(round_trip(&b, blk, 4 * g, 5), vec![5; 4096]);
    // One new allocation backs a hole of three granules.
    b.commit_range(blk, g, 3 * g).unwrap();
    assert_eq!(round_trip(&b, blk, g, 6), vec![6; 4096]);
    assert_eq!(round_trip(&b, blk, 3 * g, 7), vec![7; 4096]);
    assert_eq!(
        round_trip(&b, blk, 0, 0),
        vec![1; 4096],
        "granule 0 kept its bytes"
    );
    // Misuse is refused: moving onto memory, a hole's memory away, committing over memory.
    assert!(b.remap_range(blk, 0, g, g).is_err());
    assert!(b.commit_range(blk, 0, g).is_err());
    b.decommit_range(blk, 0, g).unwrap();
    assert!(b.remap_range(blk, 0, 4 * g, g).is_err());
    // A shrink keeps the unit that holds the new end ([g, 4g)), and growth goes on past it.
    assert_eq!(b.resize_block(blk, 2 * g).unwrap(), 4 * g);
    assert_eq!(b.resize_block(blk, 8 * g).unwrap(), 8 * g);
    assert_eq!(round_trip(&b, blk, 7 * g, 8), vec![8; 4096]);
    b.free_block(blk).unwrap();
}

#[test]
fn a_pool_keeps_contents_while_its_memory_moves() {
    let Some(b) = holes_backend() else { return };
    let g = b
        .extensions()
        .growable
        .expect("VMM on the device")
        .in_place_growth()
        .granularity;
    let front: Arc<dyn Backend> = Arc::new(Validated::new(Arc::new(b)));
    let pool = ArenaPool::new(front.clone(), ArenaConfig::device()).unwrap();
    let low = pool.allocate(4096, 256, "low").unwrap();
    let hole = pool.allocate(8 * g, 256, "hole").unwrap();
    let high = pool.allocate(4096, 256, "high").unwrap();
    round_trip(front.as_ref(), low.range.block, low.range.offset, 1);
    round_trip(front.as_ref(), high.range.block, high.range.offset, 2);
    pool.free(hole.handle).unwrap();
    // Outgrows the arena: the hole's memory goes back first; then tensors land in the hole.
    let big = pool.allocate(12 * g, 256, "big").unwrap();
    let committed = pool.stats().reserved;
    assert!(committed < 20 * g, "{committed} committed");
    pool.free(big.handle).unwrap();
    let mut refill = Vec::new();
    for i in 0..3u8 {
        let a = pool.allocate(3 * g + 4096, 256, "refill").unwrap();
        let got = round_trip(front.as_ref(), a.range.block, a.range.offset, 10 + i);
        assert_eq!(got, vec![10 + i; 4096]);
        refill.push(a);
    }
    assert!(pool.stats().reserved <= committed);
    assert_eq!(
        round_trip(front.as_ref(), low.range.block, low.range.offset, 0),
        vec![1; 4096]
    );
    assert_eq!(
        round_trip(front.as_ref(), high.range.block, high.range.offset, 0),
        vec![2; 4096]
    );
    pool.check_invariants().unwrap();
    for a in refill.into_iter().chain([low, high]) {
        pool.free(a.handle).unwrap();
    }
    pool.trim().unwrap();
    assert_eq!(pool.stats().reserved, 0);
}
