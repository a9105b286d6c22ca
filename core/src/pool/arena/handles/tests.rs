//! The units' bookkeeping alone, then the arena on a backend that takes memory back only in
//! whole units (the host behind a model of CUDA's physical allocations, which refuses any range
//! that cuts one): one creation per backed run, whole units moved and given back, contents kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::backend::{BlockDesc, BlockId, Growable, InPlaceGrowth};
use crate::host::{HostBackend, HostConfig};
use crate::pool::arena::sites::HISTORY;
use crate::pool::{Allocation, ArenaConfig, ArenaPool, DevicePool};
use crate::test_adaptors::host_adaptor;
use crate::{Error, Result};

mod growth;
mod placement;
mod whole_units;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The model's granule: a multiple of the host's page, so its ranges are the host's too.
const G: u64 = 64 * KIB;

fn units(list: &[(u64, u64)]) -> Handles {
    let mut h = Handles::default();
    for &(s, n) in list {
        h.add(s, n);
    }
    h
}

fn bits(len: u64, set: &[(u64, u64)]) -> Units {
    let mut u = Units::default();
    u.resize(len, false);
    for &(a, b) in set {
        u.set(a, b);
    }
    u
}

#[test]
fn a_unit_is_spare_only_when_all_its_granules_are() {
    let mut h = units(&[(0, 4), (4, 2), (6, 10)]);
    let committed = bits(16, &[(0, 16)]);
    // Granules 2..9 free: only the unit of 4..6 lies wholly inside.
    let mut spare = bits(16, &[(2, 9)]);
    h.respare(2, 9, &spare);
    h.check(&committed, &spare).unwrap();
    assert_eq!(h.take(16, 16), Some((4, 2)));
    h.untake(4, 2);
    // The rest of the last unit frees: it is spare too, and the largest that fits comes first.
    spare.set(9, 16);
    h.respare(9, 16, &spare);
    h.check(&committed, &spare).unwrap();
    assert_eq!(h.take(16, 16), Some((6, 10)));
    h.untake(6, 10);
    // A region on granule 7 takes its unit out of the spare ones, and no other.
    spare.clear(7, 8);
    h.unspare(7, 8);
    h.check(&committed, &spare).unwrap();
    assert_eq!(h.take(16, 16), Some((4, 2)));
    // Listed and not spare, or spare and not listed: the check says so.
    h.untake(6, 10);
    assert!(h.check(&committed, &spare).is_err());
}

#[test]
fn the_largest_spare_unit_that_fits_is_taken_and_stays_below_the_end() {
    let mut h = units(&[(0, 3), (3, 5), (8, 2), (10, 6)]);
    let spare = bits(16, &[(0, 16)]);
    h.respare(0, 16, &spare);
    // At most 5 granules: the unit of 5, not the larger one of 6.
    assert_eq!(h.take(5, 16), Some((3, 5)));
    // At most 5 again, ending by granule 8: the one of 3 (the one of 2 is smaller).
    assert_eq!(h.take(5, 8), Some((0, 3)));
    assert_eq!(h.take(1, 16), None);
    // Moved and given back units keep the books straight.
    h.moved(3, 20);
    h.removed(0);
    assert_eq!(h.boundary(22), 25);
    assert_eq!(h.boundary(20), 20);
    assert_eq!(h.boundary(9), 10);
    // The end cuts past the unit at 10: those past it are forgotten.
    h.truncate(16);
    assert_eq!(h.count(), 2);
    assert_eq!(h.take(100, 100), Some((10, 6)));
}

#[test]
fn every_granule_names_the_unit_that_holds_it_after_a_move() {
    let mut h = units(&[(0, 4), (4, 4)]);
    let mut committed = bits(12, &[(0, 8)]);
    let none = bits(12, &[]);
    h.check(&committed, &none).unwrap();
    // The first unit's memory moves past the second: its old granules name no unit.
    h.moved(0, 8);
    committed.clear(0, 4);
    committed.set(8, 12);
    h.check(&committed, &none).unwrap();
    assert_eq!((h.boundary(2), h.boundary(10)), (2, 12));
    // A granule inside the moved unit finds it: it becomes spare whole, and is taken.
    h.respare(10, 11, &bits(12, &[(8, 12)]));
    assert_eq!(h.take(4, 12), Some((8, 4)));
    h.check(&committed, &none).unwrap();
    // A granule that names a unit that does not hold it is caught.
    h.cells[5].unit = 8;
    assert!(h.check(&committed, &none).is_err());
}

#[test]
fn a_unit_whose_tensor_comes_and_goes_stays_listed_until_a_lookup_meets_it_held() {
    let mut h = units(&[(0, 6), (6, 2)]);
    let committed = bits(8, &[(0, 8)]);
    let mut spare = bits(8, &[(0, 8)]);
    h.respare(0, 8, &spare);
    // A tensor lands on the first unit and goes, again and again: both stay listed.
    for _ in 0..3 {
        spare.clear(1, 2);
        h.unspare(1, 2);
        h.check(&committed, &spare).unwrap();
        assert_eq!(h.spare.len(), 2);
        spare.set(1, 2);
        h.respare(1, 2, &spare);
        h.check(&committed, &spare).unwrap();
    }
    // Held when a lookup meets it: passed over, and unlisted on the way.
    spare.clear(1, 2);
    h.unspare(1, 2);
    assert_eq!(h.take(8, 8), Some((6, 2)));
    assert!(h.spare.is_empty());
    spare.clear(6, 8);
    h.check(&committed, &spare).unwrap();
    // Spare again: listed again, and taken.
    spare.set(1, 2);
    h.respare(1, 2, &spare);
    h.check(&committed, &spare).unwrap();
    assert_eq!(h.take(8, 8), Some((0, 6)));
}
