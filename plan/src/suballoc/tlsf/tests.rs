//! Tests of the TLSF sub-allocator: edge cases one by one, then random traces against a reference
//! model of live ranges.

use proptest::prelude::*;

use super::class::{CLASS_COUNT, class_start};
use super::*;
use crate::suballoc::model::{LiveRanges, assert_rejects_zero_and_too_large, cases, forge};
use crate::suballoc::{MAX_ALIGN, RingAllocator};

/// Allocates and unwraps the `Ok(Some(_))` case.
fn alloc(t: &mut Tlsf, size: u64, align: u64) -> Region {
    let r = t.allocate(size, align).unwrap().unwrap();
    t.check_invariants().unwrap();
    r
}

#[test]
fn size_classes_are_monotone_and_round_as_documented() {
    let mut prev = 0;
    for size in (1..5000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
        let c = class_of(size);
        assert!(c >= prev && c < CLASS_COUNT, "size {size} class {c}");
        assert!(class_start(c) <= size, "size {size} below its class start");
        if c + 1 < CLASS_COUNT {
            assert!(class_start(c + 1) > size, "size {size} beyond its class");
        }
        let up = class_at_least(size);
        assert!(up == CLASS_COUNT || class_start(up) >= size);
        prev = c;
    }
    // The acceptance threshold is at most 1/32 above the request.
    for size in [33u64, 1000, 4097, 1 << 20, (1 << 30) + 1] {
        let start = class_start(class_at_least(size));
        assert!(start - size <= size / 32, "size {size} rounds to {start}");
    }
}

#[test]
fn zero_capacity_zero_size_and_too_large_are_rejected() {
    assert!(matches!(
        Tlsf::with_min_split(10, 0),
        Err(Error::ZeroSize { .. })
    ));
    let t = assert_rejects_zero_and_too_large(1024, Tlsf::new, Tlsf::allocate, Tlsf::is_empty);
    t.check_invariants().unwrap();
}

#[test]
fn too_large_reports_the_numbers() {
    let mut t = Tlsf::new(1000).unwrap();
    match t.allocate(1001, 1) {
        Err(Error::TooLarge {
            requested, limit, ..
        }) => assert_eq!((requested, limit), (1001, 1000)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(t.is_empty());
}

#[test]
fn u64_max_range_allocates_exactly_and_in_pieces() {
    let mut t = Tlsf::new(u64::MAX).unwrap();
    let all = alloc(&mut t, u64::MAX, 1);
    assert_eq!((all.offset, all.size), (0, u64::MAX));
    assert!(t.allocate(1, 1).unwrap().is_none());
    t.free(all).unwrap();
    let a = alloc(&mut t, u64::MAX / 2, 1 << 20);
    let b = alloc(&mut t, u64::MAX / 4, MAX_ALIGN);
    assert_eq!(b.offset % MAX_ALIGN, 0);
    assert!(b.offset >= a.end());
    t.free(a).unwrap();
    t.free(b).unwrap();
    t.check_invariants().unwrap();
    assert_eq!(t.report().largest_free, u64::MAX);
}

#[test]
fn every_power_of_two_alignment_up_to_max_is_honoured() {
    let mut t = Tlsf::new(1 << 36).unwrap();
    let mut live = Vec::new();
    for shift in 0..=MAX_ALIGN.trailing_zeros() {
        let align = 1u64 << shift;
        // An odd-sized neighbour first, so the next free offset is never aligned by accident.
        live.push(alloc(&mut t, 3, 1));
        let r = alloc(&mut t, 5, align);
        assert_eq!(r.offset % align, 0, "align {align}");
        live.push(r);
    }
    for r in live {
        t.free(r).unwrap();
        t.check_invariants().unwrap();
    }
    assert_eq!(t.report().largest_free, 1 << 36);
}

#[test]
fn invalid_alignments_are_rejected_with_the_limit() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    for align in [0, 3, 48, 1000, MAX_ALIGN * 2, u64::MAX] {
        match t.allocate(16, align) {
            Err(Error::InvalidAlignment { align: a, max }) => {
                assert_eq!((a, max), (align, MAX_ALIGN));
            }
            other => panic!("align {align}: expected InvalidAlignment, got {other:?}"),
        }
    }
    assert!(t.is_empty());
}

#[test]
fn exact_fit_then_full_then_recovery() {
    let mut t = Tlsf::new(4096).unwrap();
    let a = alloc(&mut t, 1024, 256);
    let b = alloc(&mut t, 3072, 256);
    let full = t.report();
    assert_eq!((full.used, full.free, full.largest_free), (4096, 0, 0));
    assert_eq!(full.fragmentation, 0.0);
    assert_eq!(full.allocations, 2);
    assert!(
        t.allocate(1, 1).unwrap().is_none(),
        "full range must refuse"
    );
    t.free(a).unwrap();
    // The freed hole is an exact fit for the same request.
    let again = alloc(&mut t, 1024, 256);
    assert_eq!(again.offset, 0);
    t.free(again).unwrap();
    t.free(b).unwrap();
    assert!(t.is_empty());
    assert_eq!(t.report().largest_free, 4096);
}

#[test]
fn freeing_coalesces_with_both_neighbours() {
    let mut t = Tlsf::new(1 << 16).unwrap();
    let a = alloc(&mut t, 100, 1);
    let b = alloc(&mut t, 200, 1);
    let c = alloc(&mut t, 300, 1);
    let d = alloc(&mut t, 400, 1);
    t.free(a).unwrap();
    t.free(c).unwrap();
    let r = t.report();
    assert!(r.fragmentation > 0.0);
    t.free(b).unwrap(); // merges a + b + c
    t.check_invariants().unwrap();
    assert_eq!(t.report().largest_free, (1 << 16) - 1000);
    t.free(d).unwrap(); // merges everything
    t.check_invariants().unwrap();
    let r = t.report();
    assert_eq!(
        (r.free, r.largest_free, r.fragmentation),
        (1 << 16, 1 << 16, 0.0)
    );
    assert_eq!(
        t.nodes.len() - t.vacant_count,
        2,
        "one block (and the sentinel) remains"
    );
}

#[test]
fn fragmentation_is_one_minus_largest_over_free() {
    let mut t = Tlsf::new(1000).unwrap();
    let a = alloc(&mut t, 100, 1);
    let _b = alloc(&mut t, 100, 1);
    t.free(a).unwrap(); // free: 100 at 0, 800 at 200
    let r = t.report();
    assert_eq!((r.used, r.free, r.largest_free), (100, 900, 800));
    assert!((r.fragmentation - (1.0 - 800.0 / 900.0)).abs() < 1e-12);
}

#[test]
fn region_of_another_allocator_is_foreign_and_changes_nothing() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let mut other = Tlsf::new(1 << 20).unwrap();
    let mine = alloc(&mut t, 64, 1);
    let theirs = alloc(&mut other, 64, 1);
    let before = t.report();
    assert!(matches!(t.free(theirs), Err(Error::ForeignHandle { .. })));
    assert_eq!(t.report(), before);
    t.check_invariants().unwrap();

    let mut ring = RingAllocator::new(1 << 20).unwrap();
    let ring_region = ring.allocate(64, 1).unwrap().unwrap();
    assert!(matches!(
        t.free(ring_region),
        Err(Error::ForeignHandle { .. })
    ));
    t.free(mine).unwrap();
    assert!(t.is_empty());
}

#[test]
fn forged_second_handle_is_a_double_free_then_stale_after_reuse() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 64, 1);
    let _keep = alloc(&mut t, 64, 1); // keeps a's node from merging away
    let copy = forge(&a);
    let old_key = a.key;
    t.free(a).unwrap();
    assert!(matches!(t.free(copy), Err(Error::DoubleFree { .. })));
    t.check_invariants().unwrap();
    // The slot is reused for a new block: the old handle still must not free it.
    let b = alloc(&mut t, 64, 1);
    assert_eq!(b.offset, 0);
    assert_eq!(b.key as u32, old_key as u32, "same slot");
    let old = Region {
        key: old_key,
        ..forge(&b)
    };
    assert!(matches!(t.free(old), Err(Error::StaleHandle { .. })));
    // Wrong offset for a live slot, and an index beyond the node table.
    let bad = Region {
        offset: 8,
        ..forge(&b)
    };
    assert!(matches!(
        t.free(bad),
        Err(Error::Argument(crate::ArgumentError::RegionMismatch {
            slot_kind: "slot",
            ..
        }))
    ));
    let beyond = Region {
        key: 1_000_000,
        ..forge(&b)
    };
    assert!(matches!(t.free(beyond), Err(Error::ForeignHandle { .. })));
    t.check_invariants().unwrap();
    t.free(b).unwrap();
    t.check_invariants().unwrap();
}

#[test]
fn forged_handle_to_a_merged_away_slot_is_a_double_free() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 64, 1);
    let b = alloc(&mut t, 64, 1);
    let copy = forge(&b);
    t.free(a).unwrap();
    t.free(b).unwrap(); // b's node merges into a's and becomes vacant
    assert!(matches!(t.free(copy), Err(Error::DoubleFree { .. })));
    t.check_invariants().unwrap();
    assert!(t.is_empty());
}

#[test]
fn remainders_below_min_split_stay_with_the_allocation() {
    let mut t = Tlsf::with_min_split(1024, 64).unwrap();
    let a = alloc(&mut t, 1000, 1);
    assert_eq!(a.size, 1000, "the region has the size asked for");
    assert_eq!(t.report().used, 1024, "the 24-byte sliver is slack");
    assert!(t.allocate(1, 1).unwrap().is_none());
    t.free(a).unwrap();
    assert_eq!(t.report().largest_free, 1024);
}

#[test]
fn small_alignment_pad_becomes_slack_of_the_block_in_front() {
    let mut t = Tlsf::with_min_split(1024, 64).unwrap();
    let a = alloc(&mut t, 1, 1);
    let b = alloc(&mut t, 8, 16);
    assert_eq!(b.offset, 16);
    assert_eq!(t.report().used, 24);
    t.free(a).unwrap();
    // a's node took the 15-byte pad and returns it on free.
    assert_eq!(t.report().used, 8);
    t.free(b).unwrap();
    assert_eq!(t.report().largest_free, 1024);
}

#[test]
fn large_alignment_pad_becomes_a_free_block() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 1, 1);
    let b = alloc(&mut t, 8, 4096);
    assert_eq!(b.offset, 4096);
    assert_eq!(t.report().used, 9, "the pad [1, 4096) is free");
    // The pad is reused by a later request that fits it.
    let c = alloc(&mut t, 4000, 1);
    assert!(c.end() <= 4096, "pad hole reused, got offset {}", c.offset);
    for r in [a, b, c] {
        t.free(r).unwrap();
    }
    assert!(t.is_empty());
    assert_eq!(t.report().largest_free, 1 << 20);
}

#[test]
fn own_class_head_is_taken_before_a_larger_class() {
    // Holes of 1050 bytes (class [1024, 1056)) and 4000 bytes, separated by used blocks. A request
    // of 1040 rounds up past the 1050 hole's class; the own-class head must win anyway.
    let mut t = Tlsf::new(1 << 20).unwrap();
    let small = alloc(&mut t, 1050, 1);
    let _s1 = alloc(&mut t, 8, 1);
    let large = alloc(&mut t, 4000, 1);
    let _s2 = alloc(&mut t, 8, 1);
    assert_eq!(class_of(1040), class_of(1050));
    let small_at = small.offset;
    t.free(small).unwrap();
    t.free(large).unwrap();
    let r = alloc(&mut t, 1040, 1);
    assert_eq!(r.offset, small_at);
    t.check_invariants().unwrap();
}

#[test]
fn own_class_head_that_does_not_fit_falls_back_to_the_search_above() {
    // The own class holds only a 1030-byte hole; a request of 1040 must go to the 4000 hole.
    let mut t = Tlsf::new(1 << 20).unwrap();
    let small = alloc(&mut t, 1030, 1);
    let _s1 = alloc(&mut t, 8, 1);
    let large = alloc(&mut t, 4000, 1);
    let _s2 = alloc(&mut t, 8, 1);
    let large_at = large.offset;
    t.free(small).unwrap();
    t.free(large).unwrap();
    let r = alloc(&mut t, 1040, 1);
    assert_eq!(r.offset, large_at);
    t.check_invariants().unwrap();
}

#[test]
fn carving_the_front_of_a_block_keeps_it_in_its_class() {
    // A filling arena: every allocation eats the front of the tail, whose remainder stays in its
    // class (the fast path). Offsets must be consecutive, handles valid, invariants intact.
    let mut t = Tlsf::new(1 << 30).unwrap();
    let regions: Vec<_> = (0..64).map(|_| alloc(&mut t, 4096, 256)).collect();
    for (i, r) in regions.iter().enumerate() {
        assert_eq!(r.offset, i as u64 * 4096);
    }
    t.check_invariants().unwrap();
    for r in regions.into_iter().rev() {
        t.free(r).unwrap();
        t.check_invariants().unwrap();
    }
    assert!(t.is_empty());
    assert_eq!(t.report().largest_free, 1 << 30);
}

#[test]
fn a_split_remainder_that_changes_class_moves_to_its_list() {
    // A 3000-byte hole split by a 2000-byte request: the free node stays the remainder, which
    // drops to the class of 1000 and must head that list, where an exact fit then takes it whole.
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 3000, 1);
    let _b = alloc(&mut t, 100, 1);
    t.free(a).unwrap();
    assert_ne!(class_of(3000), class_of(1000));
    let r = alloc(&mut t, 2000, 1);
    assert_eq!(r.offset, 0, "the hole, not the tail");
    let rest = t.head(class_of(1000));
    assert_ne!(rest, NONE);
    let n = &t.nodes[rest as usize];
    assert_eq!((n.offset, n.size), (2000, 1000));
    let whole = alloc(&mut t, 1000, 1);
    assert_eq!(whole.offset, 2000);
    assert_eq!(
        t.head(class_of(1000)),
        NONE,
        "taken whole, the list is empty"
    );
}

#[test]
fn vacant_nodes_are_recycled_before_the_node_vector_grows() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let first: Vec<_> = (0..8).map(|_| alloc(&mut t, 1000, 1)).collect();
    let peak = t.nodes.len();
    for r in first {
        t.free(r).unwrap();
        t.check_invariants().unwrap();
    }
    assert_eq!(
        t.vacant_count,
        peak - 2,
        "all but the sentinel and the whole range"
    );
    let again: Vec<_> = (0..8).map(|_| alloc(&mut t, 1000, 1)).collect();
    assert_eq!(t.nodes.len(), peak, "every node came off the vacant stack");
    assert_eq!(t.vacant_count, 0);
    for r in again {
        t.free(r).unwrap();
    }
    t.check_invariants().unwrap();
}

#[test]
fn holes_are_filled_before_the_tail() {
    // Layout: A [0,3100) B [3100,3200) C [3200,3220) tail [3220,6320). A's hole and the tail
    // (after C merges into it) share a class, and the tail ends up at the head of that list.
    let mut t = Tlsf::new(6320).unwrap();
    let a = alloc(&mut t, 3100, 1);
    let _b = alloc(&mut t, 100, 1);
    let c = alloc(&mut t, 20, 1);
    assert_eq!(class_of(3100), class_of(3120));
    t.free(a).unwrap();
    t.free(c).unwrap();
    let r = alloc(&mut t, 2000, 1);
    assert_eq!(r.offset, 0, "the hole at 0 must be used before the tail");
}

#[test]
fn growth_extends_the_free_tail_or_appends_after_a_used_block() {
    let mut t = Tlsf::new(1000).unwrap();
    let a = alloc(&mut t, 1000, 1);
    assert_eq!(t.free_tail(), 0);
    assert!(t.allocate(500, 1).unwrap().is_none());
    t.grow(600).unwrap();
    assert_eq!((t.capacity(), t.free_tail()), (1600, 600));
    let b = alloc(&mut t, 500, 1);
    assert_eq!(b.offset, 1000, "the new bytes follow the old end");
    t.grow(400).unwrap();
    assert_eq!(t.free_tail(), 500, "growth joins the free tail");
    t.check_invariants().unwrap();
    assert!(matches!(t.grow(0), Err(Error::ZeroSize { .. })));
    assert!(matches!(t.grow(u64::MAX), Err(Error::TooLarge { .. })));
    // Cutting: never past the free tail, never the whole range; the tail may go entirely.
    assert!(t.shrink(501).is_err());
    t.shrink(500).unwrap();
    assert_eq!((t.capacity(), t.free_tail()), (1500, 0));
    t.free(b).unwrap();
    t.free(a).unwrap();
    assert!(t.shrink(1500).is_err(), "a range keeps at least one byte");
    // The tail is taken even where the general search would pass over it.
    let c = t.allocate_at_end(100, 64).unwrap().unwrap();
    assert_eq!((c.offset, c.size), (0, 100));
    assert!(
        t.allocate_at_end(1500, 1).unwrap().is_none(),
        "the tail is 1400 bytes"
    );
    let d = t.allocate_at_end(1400, 1).unwrap().unwrap();
    assert_eq!(d.offset, 100);
    assert!(t.allocate_at_end(1, 1).unwrap().is_none(), "no free tail");
    t.free(c).unwrap();
    t.free(d).unwrap();
    t.shrink(1499).unwrap();
    assert_eq!(t.capacity(), 1);
    t.check_invariants().unwrap();
}

#[test]
fn a_region_widens_in_place_into_the_free_block_after_it_only() {
    let mut t = Tlsf::new(1000).unwrap();
    let mut a = alloc(&mut t, 100, 1);
    let b = alloc(&mut t, 100, 1);
    assert!(
        !t.extend_region(&mut a, 1).unwrap(),
        "its neighbour is used"
    );
    assert_eq!(a.size, 100);
    t.free(b).unwrap();
    assert!(t.extend_region(&mut a, 300).unwrap());
    assert_eq!((a.offset, a.size), (0, 400));
    assert_eq!(t.free_bytes(), 600);
    t.check_invariants().unwrap();
    // A remainder below the minimum split stays with the region as slack.
    assert!(t.extend_region(&mut a, 590).unwrap());
    assert_eq!((a.size, t.free_bytes()), (990, 0));
    assert!(t.extend_region(&mut a, 10).unwrap(), "the slack holds it");
    assert!(!t.extend_region(&mut a, 1).unwrap(), "the range is full");
    t.check_invariants().unwrap();
    // A stale region is refused and nothing changes.
    let mut stale = forge(&a);
    t.free(a).unwrap();
    assert!(t.extend_region(&mut stale, 1).is_err());
    assert_eq!(t.free_bytes(), 1000);
    t.check_invariants().unwrap();
}

#[test]
fn refusal_respects_the_good_fit_bound() {
    // Free blocks of 1000 bytes only; a request of 1001 cannot fit, one of 1000 must.
    let mut t = Tlsf::new(3000).unwrap();
    let a = alloc(&mut t, 1000, 1);
    let _b = alloc(&mut t, 1000, 1);
    let c = alloc(&mut t, 1000, 1);
    t.free(a).unwrap();
    t.free(c).unwrap();
    assert!(t.allocate(1001, 1).unwrap().is_none());
    assert!(t.allocate(1000, 1).unwrap().is_some());
}

/// One step of a random trace.
#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: u64,
        align_log2: u32,
    },
    Free {
        pick: usize,
    },
    /// Extend the range by `by` bytes ([`Tlsf::grow`]).
    Grow {
        by: u64,
    },
    /// Cut `1 + pick % free_tail` bytes off the end when the tail is free ([`Tlsf::shrink`]).
    Shrink {
        pick: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop_oneof![1u64..=64, 1u64..=4096, 1u64..=65536, 1u64..=400_000], 0u32..=16)
            .prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => prop_oneof![1u64..=64, 1u64..=100_000].prop_map(|by| Op::Grow { by }),
        1 => any::<u64>().prop_map(|pick| Op::Shrink { pick }),
    ]
}

proptest! {
    #![proptest_config(cases(48))]

    /// Random allocate/free/grow/shrink traces: live ranges never overlap, respect alignment and
    /// bounds, the invariants hold after every step, refusals respect the good-fit bound, a shrink
    /// never cuts a live range, and freeing everything restores one free range of the full size.
    #[test]
    fn random_traces_match_the_reference_model(
        mut capacity in prop_oneof![Just(4096u64), Just(1 << 16), Just(1_000_003), Just(1 << 20)],
        min_split in prop_oneof![Just(1u64), Just(16), Just(256)],
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        let mut t = Tlsf::with_min_split(capacity, min_split).unwrap();
        let mut live: Vec<Region> = Vec::new();
        let mut model = LiveRanges::default();
        for op in ops {
            match op {
                Op::Alloc { size, align_log2 } => {
                    let align = 1u64 << align_log2;
                    match t.allocate(size, align) {
                        Err(e) => {
                            prop_assert!(size > capacity, "unexpected error {e}");
                            prop_assert!(matches!(e, Error::TooLarge { .. }), "unexpected error {}", e);
                        }
                        Ok(None) => {
                            let sure = class_at_least(size + align - 1);
                            let largest = t.report().largest_free;
                            prop_assert!(sure >= CLASS_COUNT || largest < class_start(sure),
                                "refused {size}@{align} with a {largest}-byte free block");
                        }
                        Ok(Some(r)) => {
                            model.insert(&r, size, align, capacity).map_err(TestCaseError::fail)?;
                            live.push(r);
                        }
                    }
                }
                Op::Free { pick } => {
                    if !live.is_empty() {
                        let r = live.swap_remove(pick % live.len());
                        model.remove(&r).map_err(TestCaseError::fail)?;
                        t.free(r).unwrap();
                    }
                }
                Op::Grow { by } => {
                    let tail = t.free_tail();
                    t.grow(by).unwrap();
                    capacity += by;
                    prop_assert_eq!(t.capacity(), capacity);
                    prop_assert_eq!(t.free_tail(), tail + by, "growth joins the free tail");
                }
                Op::Shrink { pick } => {
                    let tail = t.free_tail();
                    let end = model.high_water();
                    prop_assert!(capacity - tail >= end, "the free tail overlaps a live range");
                    let cut = if tail == 0 { 0 } else { 1 + pick % tail };
                    if cut == 0 || cut >= capacity {
                        prop_assert!(t.shrink(cut.max(1)).is_err());
                    } else {
                        t.shrink(cut).unwrap();
                        capacity -= cut;
                        prop_assert_eq!(t.capacity(), capacity);
                    }
                }
            }
            t.check_invariants().map_err(TestCaseError::fail)?;
            let report = t.report();
            prop_assert_eq!(report.allocations, live.len());
            prop_assert_eq!(model.len(), live.len());
            prop_assert!(report.used >= model.bytes());
            prop_assert_eq!(report.used + report.free, capacity);
        }
        for r in live.drain(..) {
            t.free(r).unwrap();
            t.check_invariants().map_err(TestCaseError::fail)?;
        }
        let report = t.report();
        prop_assert!(t.is_empty());
        prop_assert_eq!((report.used, report.largest_free), (0, capacity));
        prop_assert_eq!(t.nodes.len() - t.vacant_count, 2, "one block and the sentinel");
    }
}
