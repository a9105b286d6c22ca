//! Tests of placement at a chosen offset: found from fresh, freed, merged and reused blocks,
//! refused where the range is not free or the walk is too long, never a wrong carve.

use super::super::Tlsf;
use crate::Error;
use crate::suballoc::{Landmark, Region};

fn alloc(t: &mut Tlsf, size: u64) -> Region {
    let r = t.allocate(size, 1).unwrap().unwrap();
    t.check_invariants().unwrap();
    r
}

#[test]
fn a_freed_region_is_placed_again_where_it_was() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 4096);
    let b = alloc(&mut t, 8192);
    let c = alloc(&mut t, 4096);
    let (at, key) = (b.offset, b.key);
    t.free(b).unwrap();
    // Its block is free (merged with nothing: both neighbours are live).
    let again = t
        .allocate_at(at, 8192, 1, Some(Landmark(key)))
        .unwrap()
        .unwrap();
    assert_eq!((again.offset, again.size), (at, 8192));
    t.check_invariants().unwrap();
    for r in [a, again, c] {
        t.free(r).unwrap();
    }
    t.check_invariants().unwrap();
    assert!(t.is_empty());
}

#[test]
fn a_range_inside_a_merged_block_is_carved_with_both_remainders_free() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let regions: Vec<Region> = (0..8).map(|_| alloc(&mut t, 4096)).collect();
    let keys: Vec<u64> = regions.iter().map(|r| r.key).collect();
    let mut rest = Vec::new();
    for (i, r) in regions.into_iter().enumerate() {
        if (2..6).contains(&i) {
            t.free(r).unwrap();
        } else {
            rest.push(r);
        }
    }
    // Blocks 2..6 merged into one; block 4's node may be vacant now: start from block 7's.
    let mid = t
        .allocate_at(4 * 4096 + 256, 2048, 256, Some(Landmark(keys[7])))
        .unwrap()
        .unwrap();
    assert_eq!(mid.offset, 4 * 4096 + 256);
    t.check_invariants().unwrap();
    let report = t.report();
    assert_eq!(report.used, 4 * 4096 + 2048);
    // Both sides stay allocatable.
    let left = t
        .allocate_at(2 * 4096, 2 * 4096 + 256, 1, Some(Landmark(mid.key)))
        .unwrap();
    assert!(left.is_some());
    t.check_invariants().unwrap();
}

#[test]
fn a_taken_or_partly_taken_range_is_refused() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 4096);
    let b = alloc(&mut t, 4096);
    let key = a.key;
    // Live: not free.
    assert!(
        t.allocate_at(0, 4096, 1, Some(Landmark(key)))
            .unwrap()
            .is_none()
    );
    t.free(a).unwrap();
    // Free, but the range runs into `b`.
    assert!(
        t.allocate_at(0, 8192, 1, Some(Landmark(key)))
            .unwrap()
            .is_none()
    );
    // Past the capacity.
    assert!(
        t.allocate_at((1 << 20) - 4096, 8192, 1, Some(Landmark(key)))
            .unwrap()
            .is_none()
    );
    t.check_invariants().unwrap();
    assert!(
        t.allocate_at(0, 4096, 1, Some(Landmark(b.key)))
            .unwrap()
            .is_some()
    );
}

#[test]
fn stale_or_foreign_landmarks_cost_a_walk_and_never_a_wrong_carve() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 4096);
    let b = alloc(&mut t, 4096);
    let (ka, kb) = (a.key, b.key);
    t.free(b).unwrap();
    t.free(a).unwrap();
    // `b`'s node merged into `a`'s and is vacant: the walk starts from the end instead.
    let c = t
        .allocate_at(4096, 4096, 1, Some(Landmark(kb)))
        .unwrap()
        .unwrap();
    assert_eq!(c.offset, 4096);
    // The sentinel and indices past the node table: from the end too; a taken range is
    // refused whatever the start.
    for key in [0, u64::from(u32::MAX), 1 << 40] {
        assert!(
            t.allocate_at(4096, 256, 1, Some(Landmark(key)))
                .unwrap()
                .is_none()
        );
        let d = t
            .allocate_at(0, 256, 1, Some(Landmark(key)))
            .unwrap()
            .unwrap();
        assert_eq!(d.offset, 0);
        t.free(d).unwrap();
    }
    t.check_invariants().unwrap();
    assert!(
        t.allocate_at(4096, 4096, 1, Some(Landmark(ka)))
            .unwrap()
            .is_none()
    );
    t.free(c).unwrap();
    assert!(
        t.allocate_at(4096, 4096, 1, Some(Landmark(ka)))
            .unwrap()
            .is_some()
    );
    t.check_invariants().unwrap();
}

#[test]
fn the_walk_is_bounded() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let mut regions: Vec<Region> = (0..Tlsf::AT_STEPS + 8)
        .map(|_| alloc(&mut t, 256))
        .collect();
    let far = regions.last().unwrap().offset + 256;
    let last = regions.last().unwrap().key;
    // The free tail lies more than AT_STEPS blocks from the first region, one block from the
    // last; and the first region more than AT_STEPS from the end.
    assert!(
        t.allocate_at(far, 256, 1, Some(Landmark(regions[0].key)))
            .unwrap()
            .is_none()
    );
    let first = regions.remove(0);
    let at = first.offset;
    t.free(first).unwrap();
    assert!(t.allocate_at(at, 256, 1, None).unwrap().is_none());
    let top = t
        .allocate_at(far, 256, 1, Some(Landmark(last)))
        .unwrap()
        .unwrap();
    assert_eq!(top.offset, far);
    t.check_invariants().unwrap();
}

#[test]
fn bad_requests_are_typed_errors() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 4096);
    assert!(matches!(
        t.allocate_at(100, 256, 256, Some(Landmark(a.key))),
        Err(Error::Misaligned { value: 100, .. })
    ));
    assert!(matches!(
        t.allocate_at(0, 0, 1, Some(Landmark(a.key))),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        t.allocate_at(0, 2 << 20, 1, Some(Landmark(a.key))),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        t.allocate_at(0, 256, 3, Some(Landmark(a.key))),
        Err(Error::InvalidAlignment { .. })
    ));
    t.check_invariants().unwrap();
}

#[test]
fn none_walks_from_the_end_of_the_range() {
    let mut t = Tlsf::new(1 << 20).unwrap();
    let a = alloc(&mut t, 4096);
    // The free tail starts at 4096: place a region ending on the range's end.
    let top = t
        .allocate_at((1 << 20) - 8192, 8192, 4096, None)
        .unwrap()
        .unwrap();
    assert_eq!(top.offset, (1 << 20) - 8192);
    t.check_invariants().unwrap();
    // What lies below it stays one free block.
    assert_eq!(t.largest_free(), (1 << 20) - 8192 - 4096);
    t.free(top).unwrap();
    t.free(a).unwrap();
    assert!(t.is_empty());
}
