//! Tests of the ring allocator: edge cases, reclaim order, wrap-around, then random traces against
//! a FIFO model of live regions and their tickets.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;
use crate::suballoc::model::{assert_rejects_zero_and_too_large, cases};
use crate::suballoc::{MAX_ALIGN, Tlsf};

fn alloc(r: &mut RingAllocator, size: u64, align: u64) -> Region {
    let region = r.allocate(size, align).unwrap().unwrap();
    r.check_invariants().unwrap();
    region
}

#[test]
fn zero_and_too_large_are_rejected() {
    assert_rejects_zero_and_too_large(
        100,
        RingAllocator::new,
        RingAllocator::allocate,
        RingAllocator::is_empty,
    );
}

#[test]
fn u64_max_range_fills_exactly() {
    let mut r = RingAllocator::new(u64::MAX).unwrap();
    let a = alloc(&mut r, u64::MAX - 1, 1);
    let b = alloc(&mut r, 1, 1);
    assert_eq!(b.end(), u64::MAX);
    assert!(r.allocate(1, 1).unwrap().is_none());
    r.retire(a, 1).unwrap();
    r.retire(b, 1).unwrap();
    assert_eq!(r.reclaim(1), u64::MAX);
    assert!(r.is_empty());
}

#[test]
fn alignments_are_honoured_and_invalid_ones_rejected() {
    let mut r = RingAllocator::new(1 << 40).unwrap();
    for shift in 0..=MAX_ALIGN.trailing_zeros() {
        let align = 1u64 << shift;
        alloc(&mut r, 3, 1);
        let region = alloc(&mut r, 7, align);
        assert_eq!(region.offset % align, 0);
    }
    for align in [0, 3, 48, MAX_ALIGN * 2] {
        assert!(matches!(
            r.allocate(8, align),
            Err(Error::InvalidAlignment { max: MAX_ALIGN, .. })
        ));
    }
}

#[test]
fn exact_fit_full_and_reclaim_everything() {
    let mut r = RingAllocator::new(1024).unwrap();
    let a = alloc(&mut r, 512, 1);
    let b = alloc(&mut r, 512, 1);
    let full = r.report();
    assert_eq!((full.used, full.free, full.largest_free), (1024, 0, 0));
    assert!(r.allocate(1, 1).unwrap().is_none());
    r.retire(a, 7).unwrap();
    r.retire(b, 8).unwrap();
    assert_eq!(r.reclaim(6), 0, "nothing completed yet");
    assert_eq!(r.reclaim(7), 512);
    assert_eq!(r.reclaim(8), 512);
    assert!(r.is_empty());
    assert_eq!(r.report().largest_free, 1024);
    r.check_invariants().unwrap();
}

#[test]
fn reclaim_follows_ring_order() {
    let mut r = RingAllocator::new(1000).unwrap();
    let a = alloc(&mut r, 100, 1);
    let b = alloc(&mut r, 100, 1);
    let c = alloc(&mut r, 100, 1);
    r.retire(b, 1).unwrap();
    assert_eq!(r.reclaim(10), 0, "b waits behind a, which is not retired");
    r.retire(a, 5).unwrap();
    assert_eq!(r.reclaim(4), 0, "a waits for ticket 5");
    assert_eq!(r.reclaim(5), 200, "a and then b");
    assert_eq!(r.report().allocations, 1);
    r.retire(c, 2).unwrap();
    assert_eq!(r.reclaim(5), 100);
    assert!(r.is_empty());
}

#[test]
fn wraps_to_the_start_and_counts_the_skipped_bytes() {
    let mut r = RingAllocator::new(1000).unwrap();
    let a = alloc(&mut r, 400, 1);
    let b = alloc(&mut r, 400, 1);
    r.retire(a, 1).unwrap();
    assert_eq!(r.reclaim(1), 400);
    // 200 bytes remain at the end; a 300-byte request wraps to 0 and takes them as well.
    let c = alloc(&mut r, 300, 1);
    assert_eq!(c.offset, 0);
    assert_eq!(r.report().used, 400 + 200 + 300);
    assert_eq!(r.report().largest_free, 100);
    assert!(r.allocate(101, 1).unwrap().is_none());
    let d = alloc(&mut r, 100, 1);
    assert_eq!(d.offset, 300);
    r.retire(b, 2).unwrap();
    r.retire(c, 2).unwrap();
    r.retire(d, 2).unwrap();
    assert_eq!(r.reclaim(2), 1000);
    assert!(r.is_empty());
}

#[test]
fn foreign_regions_are_rejected_and_change_nothing() {
    let mut r = RingAllocator::new(1000).unwrap();
    let mut other = RingAllocator::new(1000).unwrap();
    let mine = alloc(&mut r, 10, 1);
    let theirs = alloc(&mut other, 10, 1);
    assert!(matches!(
        r.retire(theirs, 1),
        Err(Error::ForeignHandle { .. })
    ));
    let mut tlsf = Tlsf::new(1000).unwrap();
    let t = tlsf.allocate(10, 1).unwrap().unwrap();
    assert!(matches!(r.retire(t, 1), Err(Error::ForeignHandle { .. })));
    // A forged handle to a slot that was already retired, and one to a reclaimed slot.
    let forged = Region {
        offset: mine.offset,
        size: mine.size,
        owner: mine.owner,
        key: mine.key,
    };
    r.retire(mine, 1).unwrap();
    assert!(matches!(
        r.retire(forged, 1),
        Err(Error::ForeignHandle { .. })
    ));
    r.reclaim(1);
    let gone = Region {
        offset: 0,
        size: 10,
        owner: r.owner,
        key: 0,
    };
    assert!(matches!(
        r.retire(gone, 1),
        Err(Error::ForeignHandle { .. })
    ));
    r.check_invariants().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u32 },
    Retire { pick: usize, delay: u64 },
    Reclaim { back: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=3000, 0u32..=10).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        3 => (any::<usize>(), 0u64..4).prop_map(|(pick, delay)| Op::Retire { pick, delay }),
        2 => (0u64..4).prop_map(|back| Op::Reclaim { back }),
    ]
}

proptest! {
    #![proptest_config(cases(64))]

    /// Live regions never overlap and respect alignment and bounds; reclaim frees exactly the
    /// model's retired prefix; a refusal means no free run holds the aligned request; retiring and
    /// reclaiming everything restores the full range.
    #[test]
    fn random_traces_match_the_fifo_model(
        capacity in prop_oneof![Just(1000u64), Just(4096), Just(10_007), Just(1 << 16)],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut ring = RingAllocator::new(capacity).unwrap();
        // Model: live regions oldest first, with (offset, end, retired ticket).
        let mut model: VecDeque<(u64, u64, Option<u64>)> = VecDeque::new();
        let mut held: Vec<(usize, Region)> = Vec::new(); // not yet retired: (model seq, region)
        let (mut seq_front, mut seq_next, mut clock) = (0usize, 0usize, 0u64);
        for op in ops {
            match op {
                Op::Alloc { size, align_log2 } => {
                    let align = 1u64 << align_log2;
                    match ring.allocate(size, align) {
                        Err(_) => prop_assert!(size > capacity),
                        Ok(None) => {
                            let largest = ring.report().largest_free;
                            prop_assert!(largest < size + align - 1,
                                "refused {size}@{align} with a free run of {largest}");
                        }
                        Ok(Some(r)) => {
                            prop_assert_eq!(r.offset % align, 0);
                            prop_assert!(r.end() <= capacity);
                            for &(o, e, _) in &model {
                                prop_assert!(e <= r.offset || r.end() <= o,
                                    "[{}, {}) overlaps [{o}, {e})", r.offset, r.end());
                            }
                            model.push_back((r.offset, r.end(), None));
                            held.push((seq_next, r));
                            seq_next += 1;
                        }
                    }
                }
                Op::Retire { pick, delay } => {
                    if !held.is_empty() {
                        let (seq, r) = held.swap_remove(pick % held.len());
                        clock += 1;
                        let ticket = clock + delay;
                        model[seq - seq_front].2 = Some(ticket);
                        ring.retire(r, ticket).unwrap();
                    }
                }
                Op::Reclaim { back } => {
                    let completed = clock.saturating_sub(back);
                    let before = ring.report().used;
                    let mut expect = 0;
                    while let Some(&(_, _, Some(t))) = model.front() {
                        if t > completed {
                            break;
                        }
                        model.pop_front();
                        seq_front += 1;
                        expect += 1;
                    }
                    let live_before = ring.report().allocations;
                    let bytes = ring.reclaim(completed);
                    prop_assert_eq!(live_before - ring.report().allocations, expect);
                    prop_assert_eq!(before - ring.report().used, bytes);
                }
            }
            ring.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(ring.report().allocations, model.len());
        }
        for (_, r) in held.drain(..) {
            ring.retire(r, clock).unwrap();
        }
        ring.reclaim(u64::MAX);
        ring.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert!(ring.is_empty());
        let report = ring.report();
        prop_assert_eq!((report.used, report.largest_free), (0, capacity));
    }
}
