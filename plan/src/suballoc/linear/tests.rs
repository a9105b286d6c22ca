//! Tests of the linear allocator: edge cases, then random traces against an exact model (the bump
//! pointer is deterministic, so the model predicts every offset and every refusal).

use proptest::prelude::*;

use super::*;
use crate::Error;
use crate::suballoc::MAX_ALIGN;
use crate::suballoc::model::{assert_rejects_zero_and_too_large, cases};

#[test]
fn zero_and_too_large_are_rejected() {
    assert_rejects_zero_and_too_large(
        100,
        LinearAllocator::new,
        LinearAllocator::allocate,
        LinearAllocator::is_empty,
    );
}

#[test]
fn u64_max_range_and_alignment_near_the_end() {
    let mut l = LinearAllocator::new(u64::MAX).unwrap();
    let a = l.allocate(u64::MAX - 10, 1).unwrap().unwrap();
    assert_eq!(a.offset, 0);
    // The next aligned offset would overflow: refused, not a panic.
    assert!(l.allocate(1, MAX_ALIGN).unwrap().is_none());
    let b = l.allocate(10, 1).unwrap().unwrap();
    assert_eq!(b.end(), u64::MAX);
    assert!(l.allocate(1, 1).unwrap().is_none());
    l.check_invariants().unwrap();
}

#[test]
fn alignments_are_honoured_and_invalid_ones_rejected() {
    let mut l = LinearAllocator::new(1 << 40).unwrap();
    for shift in 0..=MAX_ALIGN.trailing_zeros() {
        let align = 1u64 << shift;
        l.allocate(3, 1).unwrap().unwrap();
        let r = l.allocate(7, align).unwrap().unwrap();
        assert_eq!(r.offset % align, 0);
    }
    for align in [0, 3, 48, MAX_ALIGN * 2] {
        assert!(matches!(
            l.allocate(8, align),
            Err(Error::InvalidAlignment { max: MAX_ALIGN, .. })
        ));
    }
    l.check_invariants().unwrap();
}

#[test]
fn exact_fit_full_and_reset() {
    let mut l = LinearAllocator::new(1024).unwrap();
    let a = l.allocate(1000, 1).unwrap().unwrap();
    assert!(l.is_current(&a));
    let b = l.allocate(24, 8).unwrap().unwrap();
    assert_eq!(b.offset, 1000);
    let r = l.report();
    assert_eq!(
        (r.used, r.free, r.largest_free, r.allocations),
        (1024, 0, 0, 2)
    );
    assert!(l.allocate(1, 1).unwrap().is_none());
    l.reset();
    assert!(!l.is_current(&a), "regions of an earlier epoch are void");
    assert!(l.is_empty());
    assert_eq!(l.report().largest_free, 1024);
    assert_eq!(l.allocate(1024, 1).unwrap().unwrap().offset, 0);
}

#[test]
fn padding_shows_as_fragmentation() {
    let mut l = LinearAllocator::new(1000).unwrap();
    l.allocate(1, 1).unwrap().unwrap();
    l.allocate(1, 256).unwrap().unwrap(); // 255 bytes of padding
    let r = l.report();
    assert_eq!((r.used, r.free, r.largest_free), (2, 998, 743));
    assert!(r.fragmentation > 0.25);
}

#[test]
fn regions_of_other_allocators_are_not_current() {
    let mut a = LinearAllocator::new(100).unwrap();
    let mut b = LinearAllocator::new(100).unwrap();
    let ra = a.allocate(10, 1).unwrap().unwrap();
    let _rb = b.allocate(10, 1).unwrap().unwrap();
    assert!(!b.is_current(&ra));
    assert!(a.is_current(&ra));
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u32 },
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (1u64..=5000, 0u32..=14).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        1 => Just(Op::Reset),
    ]
}

proptest! {
    #![proptest_config(cases(64))]

    /// Every offset is the model's bump position, regions of an epoch never overlap and stay in
    /// bounds, refusals happen exactly when the model's range is exhausted.
    #[test]
    fn random_traces_match_the_bump_model(
        capacity in prop_oneof![Just(1u64), Just(4096), Just(100_003), Just(1 << 20)],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut l = LinearAllocator::new(capacity).unwrap();
        let mut top = 0u64;
        let mut epoch: Vec<Region> = Vec::new();
        for op in ops {
            match op {
                Op::Reset => {
                    l.reset();
                    top = 0;
                    epoch.clear();
                }
                Op::Alloc { size, align_log2 } => {
                    let align = 1u64 << align_log2;
                    let expect = top.div_ceil(align) * align;
                    match l.allocate(size, align) {
                        Err(_) => prop_assert!(size > capacity),
                        Ok(None) => prop_assert!(expect + size > capacity),
                        Ok(Some(r)) => {
                            prop_assert_eq!(r.offset, expect);
                            prop_assert!(r.end() <= capacity);
                            prop_assert!(epoch.last().is_none_or(|p| p.end() <= r.offset));
                            top = r.end();
                            epoch.push(r);
                        }
                    }
                }
            }
            l.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert!(epoch.iter().all(|r| l.is_current(r)));
            let report = l.report();
            prop_assert_eq!(report.used, epoch.iter().map(|r| r.size).sum::<u64>());
            prop_assert_eq!(report.largest_free, capacity - top);
        }
        l.reset();
        prop_assert_eq!(l.report().largest_free, capacity);
    }
}
