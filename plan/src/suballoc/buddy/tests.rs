//! Tests of the buddy allocator: edge cases one by one, then random traces against the reference
//! model of live ranges shared with TLSF (`suballoc/model.rs`).

use proptest::prelude::*;

use super::*;
use crate::suballoc::model::{LiveRanges, cases, forge};
use crate::suballoc::{MAX_ALIGN, SubAllocator, Tlsf};

/// Allocates, unwraps the `Ok(Some(_))` case and checks the invariants.
fn alloc(b: &mut Buddy, size: u64, align: u64) -> Region {
    let r = b.allocate(size, align).unwrap().unwrap();
    b.check_invariants().unwrap();
    r
}

#[test]
fn orders_round_up_to_the_next_power_of_two() {
    let cases = [
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (1 << 40, 40),
        ((1 << 40) + 1, 41),
    ];
    for (size, order) in cases {
        assert_eq!(order_at_least(size), order, "size {size}");
    }
    assert_eq!(order_at_least(u64::MAX), 64);
}

#[test]
fn zero_capacity_zero_size_and_bad_min_block_are_rejected() {
    assert!(matches!(Buddy::new(0), Err(Error::ZeroSize { .. })));
    for min_block in [0, 3, 24, MAX_ALIGN * 2] {
        assert!(matches!(
            Buddy::with_min_block(1024, min_block),
            Err(Error::InvalidAlignment { .. })
        ));
    }
    let mut b = Buddy::new(1024).unwrap();
    assert!(matches!(b.allocate(0, 1), Err(Error::ZeroSize { .. })));
    for align in [0, 3, 48, MAX_ALIGN * 2, u64::MAX] {
        match b.allocate(16, align) {
            Err(Error::InvalidAlignment { align: a, max }) => {
                assert_eq!((a, max), (align, MAX_ALIGN));
            }
            other => panic!("align {align}: expected InvalidAlignment, got {other:?}"),
        }
    }
    assert!(b.is_empty());
    b.check_invariants().unwrap();
}

#[test]
fn too_large_reports_the_largest_block() {
    // 96 KiB = a 64 KiB and a 32 KiB top block: 64 KiB + 1 can never fit, though it is below
    // the capacity; 96 KiB + 1 is beyond the range itself.
    let mut b = Buddy::new(96 << 10).unwrap();
    match b.allocate((64 << 10) + 1, 1) {
        Err(Error::TooLarge {
            requested, limit, ..
        }) => assert_eq!((requested, limit), ((64 << 10) + 1, 64 << 10)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    match b.allocate((96 << 10) + 1, 1) {
        Err(Error::TooLarge { limit, .. }) => assert_eq!(limit, 96 << 10),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(matches!(
        b.allocate(u64::MAX, 1),
        Err(Error::TooLarge { .. })
    ));
    assert!(b.is_empty());
    let whole = alloc(&mut b, 64 << 10, 1);
    assert_eq!(whole.offset, 0);
    let rest = alloc(&mut b, 32 << 10, 1);
    assert_eq!(rest.offset, 64 << 10);
    assert!(
        b.allocate(1, 1).unwrap().is_none(),
        "full range must refuse"
    );
}

#[test]
fn a_request_holds_the_next_power_of_two_and_splits_leave_the_halves() {
    let mut b = Buddy::new(1024).unwrap();
    let r = alloc(&mut b, 100, 1);
    assert_eq!(
        (r.offset, r.size),
        (0, 100),
        "the region has the size asked for"
    );
    let rep = b.report();
    assert_eq!(rep.used, 128, "100 bytes hold a 128-byte block");
    // Free halves of 128, 256 and 512 bytes after the three splits.
    assert_eq!((rep.free, rep.largest_free), (896, 512));
    assert_eq!(b.bitmap, 0b11_1000_0000);
    let s = alloc(&mut b, 1, 1);
    assert_eq!(
        (s.offset, b.report().used),
        (128, 144),
        "min block 16 at the next half"
    );
    b.free(r).unwrap();
    b.free(s).unwrap();
    b.check_invariants().unwrap();
    let rep = b.report();
    assert_eq!(
        (rep.used, rep.largest_free, rep.fragmentation),
        (0, 1024, 0.0)
    );
    assert_eq!(
        b.nodes.len() - b.vacant.len(),
        1,
        "merged back into the top block"
    );
}

#[test]
fn free_merges_with_the_buddy_only() {
    let mut b = Buddy::with_min_block(1024, 256).unwrap();
    let [w, x, y, z] = [0; 4].map(|_| alloc(&mut b, 256, 1));
    assert_eq!([w.offset, x.offset, y.offset, z.offset], [0, 256, 512, 768]);
    // x and y are neighbours but not buddies: freeing both merges nothing.
    assert_eq!(b.free_merged(x).unwrap(), (256, 256));
    assert_eq!(b.free_merged(y).unwrap(), (512, 256));
    assert_eq!(b.report().largest_free, 256);
    assert!(b.report().fragmentation > 0.0);
    // w's buddy x is free: they merge into [0, 512), whose buddy [512, 1024) is not free yet.
    assert_eq!(b.free_merged(w).unwrap(), (0, 512));
    assert_eq!(
        b.free_merged(z).unwrap(),
        (0, 1024),
        "merges all the way up"
    );
    b.check_invariants().unwrap();
    assert!(b.is_empty());
}

#[test]
fn every_power_of_two_alignment_up_to_max_is_honoured() {
    let mut b = Buddy::with_min_block(1 << 36, 1).unwrap();
    let mut live = Vec::new();
    for shift in 0..=MAX_ALIGN.trailing_zeros() {
        let align = 1u64 << shift;
        // An odd-sized neighbour first, so the lowest free block is small and unaligned.
        live.push(alloc(&mut b, 3, 1));
        let r = alloc(&mut b, 5, align);
        assert_eq!(r.offset % align, 0, "align {align}");
        live.push(r);
    }
    for r in live {
        b.free(r).unwrap();
        b.check_invariants().unwrap();
    }
    assert_eq!(b.report().largest_free, 1 << 36);
}

#[test]
fn alignment_beyond_the_block_skips_unaligned_heads() {
    let mut b = Buddy::with_min_block(1 << 20, 16).unwrap();
    let a = alloc(&mut b, 16, 1); // leaves free halves of 16, 32, 64, ... at their own offsets
    let r = alloc(&mut b, 16, 4096);
    assert_eq!(
        r.offset, 4096,
        "the first free block of 4 KiB or more, split down"
    );
    b.free(r).unwrap();
    // A head that happens to be aligned is taken though its order is below the alignment:
    // [32, 64) and [64, 128) used, then [32, 64) freed (its buddy [0, 32) is split, not free).
    let x = alloc(&mut b, 32, 1);
    let y = alloc(&mut b, 64, 1);
    assert_eq!((x.offset, y.offset), (32, 64));
    b.free(x).unwrap();
    let c = alloc(&mut b, 8, 32);
    assert_eq!(c.offset, 32, "the free 32-byte block at 32");
    let d = alloc(&mut b, 8, 64);
    assert_eq!(d.offset % 64, 0);
    assert!(d.offset >= 128, "no free block below 128 is 64-aligned");
    for r in [a, y, c, d] {
        b.free(r).unwrap();
    }
    assert!(b.is_empty());
    b.check_invariants().unwrap();
}

#[test]
fn an_odd_capacity_is_cut_into_top_blocks_that_never_merge() {
    // 1000 = 512 + 256 + 128 + 64 + 32 + 8; with min block 16 the 8-byte tail is still usable.
    let mut b = Buddy::new(1000).unwrap();
    b.check_invariants().unwrap();
    let mut top: Vec<Region> = [512, 256, 128, 64, 32, 8]
        .map(|s| alloc(&mut b, s, 1))
        .into();
    let offsets: Vec<u64> = top.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 512, 768, 896, 960, 992]);
    assert!(b.allocate(1, 1).unwrap().is_none());
    assert_eq!(b.report().used, 1000);
    // Freeing the 32-byte block at 960 does not merge it with the 8 bytes after it.
    let r32 = top.remove(4);
    assert_eq!(b.free_merged(r32).unwrap(), (960, 32));
    let tail = top.pop().unwrap();
    assert_eq!(b.free_merged(tail).unwrap(), (992, 8));
    // The 8-byte tail, below min_block, is handed out whole to a request it holds.
    let small = alloc(&mut b, 3, 1);
    assert_eq!((small.offset, b.report().used), (992, 1000 - 32));
    top.push(small);
    for r in top {
        b.free(r).unwrap();
    }
    b.check_invariants().unwrap();
    assert_eq!(b.nodes.len() - b.vacant.len(), 6, "six top blocks");
}

#[test]
fn u64_max_range_allocates_the_largest_block_and_pieces() {
    let mut b = Buddy::new(u64::MAX).unwrap();
    let half = alloc(&mut b, 1 << 63, 1);
    assert_eq!((half.offset, b.largest_free()), (0, 1 << 62));
    assert!(matches!(
        b.allocate(u64::MAX, 1),
        Err(Error::TooLarge { .. })
    ));
    let small = alloc(&mut b, 1, MAX_ALIGN);
    assert_eq!(small.offset % MAX_ALIGN, 0);
    assert!(small.offset >= half.end());
    b.free(half).unwrap();
    b.free(small).unwrap();
    b.check_invariants().unwrap();
    assert_eq!(b.report().free, u64::MAX);
}

#[test]
fn region_of_another_allocator_is_foreign_and_changes_nothing() {
    let mut b = Buddy::new(1 << 20).unwrap();
    let mut other = Buddy::new(1 << 20).unwrap();
    let mut tlsf = Tlsf::new(1 << 20).unwrap();
    let mine = alloc(&mut b, 64, 1);
    let before = b.report();
    let theirs = other.allocate(64, 1).unwrap().unwrap();
    assert!(matches!(b.free(theirs), Err(Error::ForeignHandle { .. })));
    let from_tlsf = tlsf.allocate(64, 1).unwrap().unwrap();
    assert!(matches!(
        b.free(from_tlsf),
        Err(Error::ForeignHandle { .. })
    ));
    assert_eq!(b.report(), before);
    b.check_invariants().unwrap();
    // And a buddy region given to TLSF is foreign there.
    let to_tlsf = alloc(&mut b, 64, 1);
    assert!(matches!(
        tlsf.free(to_tlsf),
        Err(Error::ForeignHandle { .. })
    ));
    b.free(mine).unwrap();
}

#[test]
fn forged_handles_are_double_frees_stale_or_invalid_never_panics() {
    let mut b = Buddy::new(1 << 20).unwrap();
    let a = alloc(&mut b, 64, 1);
    let _keep = alloc(&mut b, 64, 1); // a's buddy: keeps a's node from merging away
    let copy = forge(&a);
    let old_key = a.key;
    b.free(a).unwrap();
    assert!(matches!(b.free(copy), Err(Error::DoubleFree { .. })));
    // The node is reused for a new block: the old handle still must not free it.
    let c = alloc(&mut b, 64, 1);
    assert_eq!(c.key as u32, old_key as u32, "same node");
    let old = Region {
        key: old_key,
        ..forge(&c)
    };
    assert!(matches!(b.free(old), Err(Error::StaleHandle { .. })));
    let moved = Region {
        offset: 16,
        ..forge(&c)
    };
    assert!(matches!(
        b.free(moved),
        Err(Error::Argument(crate::ArgumentError::RegionMismatch {
            slot_kind: "block",
            ..
        }))
    ));
    let grown = Region {
        size: 65,
        ..forge(&c)
    };
    assert!(matches!(
        b.free(grown),
        Err(Error::Argument(crate::ArgumentError::RegionMismatch {
            slot_kind: "block",
            ..
        }))
    ));
    let beyond = Region {
        key: 1_000_000,
        ..forge(&c)
    };
    assert!(matches!(b.free(beyond), Err(Error::ForeignHandle { .. })));
    // A split node (the top block) is not a live region either.
    let split = Region {
        key: 0,
        offset: 0,
        ..forge(&c)
    };
    assert!(matches!(b.free(split), Err(Error::DoubleFree { .. })));
    b.check_invariants().unwrap();
    b.free(c).unwrap();
    b.check_invariants().unwrap();
}

#[test]
fn a_merged_away_block_is_a_double_free() {
    let mut b = Buddy::new(1 << 20).unwrap();
    let x = alloc(&mut b, 64, 1);
    let y = alloc(&mut b, 64, 1);
    let copy = forge(&y);
    b.free(x).unwrap();
    b.free(y).unwrap(); // both nodes vacant after the merge
    assert!(matches!(b.free(copy), Err(Error::DoubleFree { .. })));
    assert!(b.is_empty());
}

#[test]
fn vacant_nodes_are_recycled_before_the_node_vector_grows() {
    let mut b = Buddy::new(1 << 20).unwrap();
    let first: Vec<_> = (0..8).map(|_| alloc(&mut b, 1000, 1)).collect();
    let peak = b.nodes.len();
    for r in first {
        b.free(r).unwrap();
    }
    assert_eq!(b.vacant.len(), peak - 1, "all but the top block");
    let again: Vec<_> = (0..8).map(|_| alloc(&mut b, 1000, 1)).collect();
    assert_eq!(b.nodes.len(), peak, "every node came off the vacant stack");
    for r in again {
        b.free(r).unwrap();
    }
    b.check_invariants().unwrap();
}

#[test]
fn the_trait_reports_held_bytes() {
    fn fill<A: SubAllocator>(a: &mut A, sizes: &[u64]) -> (u64, Vec<Region>) {
        let live: Vec<_> = sizes
            .iter()
            .map(|&s| a.allocate(s, 1).unwrap().unwrap())
            .collect();
        (a.used(), live)
    }
    let sizes = [100, 300, 1000];
    let (held, live) = fill(&mut Buddy::new(1 << 20).unwrap(), &sizes);
    assert_eq!(held, 128 + 512 + 1024);
    assert_eq!(live.len(), 3);
    let mut tlsf = Tlsf::with_min_split(1 << 20, 1).unwrap();
    let (held, live) = fill(&mut tlsf, &sizes);
    assert_eq!((held, tlsf.capacity()), (1400, 1 << 20));
    for r in live {
        SubAllocator::free(&mut tlsf, r).unwrap();
    }
    assert_eq!(SubAllocator::used(&tlsf), 0);
}

/// One step of a random trace.
#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u32 },
    Free { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop_oneof![1u64..=64, 1u64..=4096, 1u64..=65536, 1u64..=400_000], 0u32..=16)
            .prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ]
}

proptest! {
    #![proptest_config(cases(48))]

    /// Random allocate/free traces: live ranges never overlap, respect alignment and bounds,
    /// the invariants hold after every step, each region holds the next power of two, refusals
    /// respect the packing bound, and freeing everything restores the top blocks.
    #[test]
    fn random_traces_match_the_reference_model(
        capacity in prop_oneof![Just(4096u64), Just(1 << 16), Just(1_000_003), Just(1 << 20)],
        min_block in prop_oneof![Just(1u64), Just(16), Just(256)],
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        let mut b = Buddy::with_min_block(capacity, min_block).unwrap();
        let mut live: Vec<Region> = Vec::new();
        let mut model = LiveRanges::default();
        let mut held = 0u64;
        let block = |size: u64| size.next_power_of_two().max(min_block);
        for op in ops {
            match op {
                Op::Alloc { size, align_log2 } => {
                    let align = 1u64 << align_log2;
                    match b.allocate(size, align) {
                        Err(e) => {
                            let top = 1u64 << (63 - capacity.leading_zeros());
                            prop_assert!(size > top, "unexpected error {e}");
                            prop_assert!(matches!(e, Error::TooLarge { .. }), "unexpected error {}", e);
                        }
                        Ok(None) => {
                            let sure = size.next_power_of_two().max(align);
                            let largest = b.report().largest_free;
                            prop_assert!(largest < sure,
                                "refused {size}@{align} with a {largest}-byte free block");
                        }
                        Ok(Some(r)) => {
                            model.insert(&r, size, align, capacity).map_err(TestCaseError::fail)?;
                            // A block smaller than min_block is only ever a whole top block.
                            let used_before = held;
                            held = b.report().used;
                            prop_assert!(held - used_before <= block(size));
                            prop_assert!(held - used_before >= size.next_power_of_two());
                            live.push(r);
                        }
                    }
                }
                Op::Free { pick } => {
                    if !live.is_empty() {
                        let r = live.swap_remove(pick % live.len());
                        model.remove(&r).map_err(TestCaseError::fail)?;
                        b.free(r).unwrap();
                        held = b.report().used;
                    }
                }
            }
            b.check_invariants().map_err(TestCaseError::fail)?;
            let report = b.report();
            prop_assert_eq!(report.allocations, live.len());
            prop_assert_eq!(model.len(), live.len());
            prop_assert!(report.used >= model.bytes());
            prop_assert!(report.used < 2 * model.bytes() + min_block * live.len() as u64 + 1);
            prop_assert_eq!(report.used + report.free, capacity);
        }
        for r in live.drain(..) {
            model.remove(&r).map_err(TestCaseError::fail)?;
            b.free(r).unwrap();
            b.check_invariants().map_err(TestCaseError::fail)?;
        }
        let report = b.report();
        prop_assert!(b.is_empty());
        prop_assert_eq!((report.used, report.free), (0, capacity));
        prop_assert_eq!(report.largest_free, 1 << (63 - capacity.leading_zeros()));
        prop_assert_eq!(b.nodes.len() - b.vacant.len(), capacity.count_ones() as usize,
            "only the top blocks remain");
    }
}
