//! The arena growing on whole units: one new unit per backed run, spare units taken whole,
//! extended or committed growth, trim, and churn that keeps to whole units.

use super::whole_units::{WholeUnits, check, pool, release};
use super::*;
use crate::pool::arena::testing::{assert_holds, churn, filled};

#[test]
fn a_run_over_many_granules_is_one_new_unit_and_is_reused_in_place() {
    let backend = WholeUnits::new();
    let p = pool(&backend, true);
    let pin = filled(&backend, &p, 64 * KIB, 1);
    let big = filled(&backend, &p, 8 * MIB, 2);
    let top = filled(&backend, &p, 64 * KIB, 3);
    check(&backend, &p);
    p.free(big.handle).unwrap();
    // The hole is 128 granules of one unit; trim gives the unit back whole.
    assert!(p.trim().unwrap() >= 8 * MIB - 2 * G);
    check(&backend, &p);
    let created = backend.created();
    // The same tensor lands on the decommitted run again: one creation for all of it.
    let again = filled(&backend, &p, 8 * MIB, 4);
    check(&backend, &p);
    assert_eq!(backend.created(), created + 1);
    // Freed and allocated again, it lands on its unit, still committed: no call at all.
    p.free(again.handle).unwrap();
    let again = filled(&backend, &p, 8 * MIB, 5);
    check(&backend, &p);
    assert_eq!((backend.created(), backend.moved()), (created + 1, 0));
    for (a, byte) in [(&pin, 1), (&top, 3), (&again, 5)] {
        assert_holds(&backend, a, byte);
    }
    release(&backend, &p, [pin, top, again]);
}

#[test]
fn a_region_on_a_run_gets_whole_spare_units_largest_first_then_one_new_unit() {
    let backend = WholeUnits::new();
    let p = pool(&backend, false);
    // Tensors of 1, 2, 3 and 6 MiB, each committed (most of it) by a growth of its own, pinned
    // apart.
    let mut pins = Vec::new();
    let mut held = Vec::new();
    for (i, mib) in [1u64, 2, 3, 6].into_iter().enumerate() {
        pins.push(filled(&backend, &p, 64 * KIB, 10 + i as u8));
        held.push(filled(&backend, &p, mib * MIB, 20 + i as u8));
    }
    pins.push(filled(&backend, &p, 64 * KIB, 30));
    check(&backend, &p);
    // The 6 MiB one goes and trim gives its memory back: a decommitted run.
    let last = held.pop().unwrap();
    p.free(last.handle).unwrap();
    assert!(p.trim().unwrap() >= 5 * MIB);
    // The others go: their units lie in free space, spare, still committed.
    for a in held {
        p.free(a.handle).unwrap();
    }
    check(&backend, &p);
    let (created, reserved) = (backend.created(), p.stats().reserved);
    // A later phase with a lower live peak: the pool is over its allowance, so a tensor on the
    // decommitted run gets spare memory moved there rather than new memory.
    {
        let mut st = p.growing().unwrap().lock();
        st.stats.peak_in_use = st.stats.in_use;
    }
    let x = filled(&backend, &p, 6 * MIB, 40);
    check(&backend, &p);
    assert_holds(&backend, &x, 40);
    for (i, a) in pins.iter().enumerate() {
        assert_holds(&backend, a, if i < 4 { 10 + i as u8 } else { 30 });
    }
    // The run is 93 granules: the 3 MiB tensor's unit (47) fits first, then the 2 MiB one's
    // (32); the 1 MiB one's (16) no longer does, so one new unit backs the 14 left. Smallest
    // first would have moved 16 + 32 and created 45 granules.
    assert_eq!((backend.moved(), backend.created()), (2, created + 1));
    assert!(
        p.stats().reserved - reserved < MIB,
        "{} committed past {reserved}",
        p.stats().reserved
    );
    p.free(x.handle).unwrap();
    release(&backend, &p, pins);
}

/// Spare units of 8 granules, and a 28-granule request that fits no free range: extended, the
/// growth takes both spare units and one new unit for the rest, so the pool commits exactly
/// the live bytes; committed at the end instead, one spare unit goes back for the growth's
/// excess over the allowance and the other stays (`llama8b_prefill`'s first feed-forward
/// peak).
#[test]
fn an_extended_growth_takes_the_spare_units_and_one_new_unit() {
    for extends in [true, false] {
        let backend = if extends {
            WholeUnits::extending()
        } else {
            WholeUnits::new()
        };
        let p = pool(&backend, false);
        let mut t: Vec<Allocation> = (0..4u8)
            .map(|i| filled(&backend, &p, 8 * G, i + 1))
            .collect();
        assert_eq!(backend.units(), 4);
        let d = t.pop().unwrap();
        let c = t.pop().unwrap();
        let b = t.pop().unwrap();
        let a = t.pop().unwrap();
        p.free(a.handle).unwrap();
        p.free(c.handle).unwrap();
        let created = backend.created();
        let e = filled(&backend, &p, 28 * G, 9);
        check(&backend, &p);
        for (x, byte) in [(&b, 2), (&d, 4), (&e, 9)] {
            assert_holds(&backend, x, byte);
        }
        assert_eq!(p.stats().in_use, 44 * G);
        if extends {
            assert_eq!((backend.moved(), backend.created()), (2, created + 1));
            assert_eq!(p.stats().reserved, 44 * G, "no spare unit is left");
        } else {
            assert_eq!(backend.created(), created + 1);
            assert_eq!(p.stats().reserved, 52 * G, "one spare unit stays");
        }
        release(&backend, &p, [b, d, e]);
    }
}

#[test]
fn trim_gives_back_whole_spare_units_and_keeps_those_a_tensor_touches() {
    let backend = WholeUnits::new();
    let p = pool(&backend, true);
    // The arena's first unit, 32 MiB; then a growth of a thirty-second of it (1 MiB, one
    // unit) holds the two small ones.
    let a = filled(&backend, &p, 32 * MIB, 1);
    let b = filled(&backend, &p, 64 * KIB, 2);
    let c = filled(&backend, &p, 64 * KIB, 3);
    check(&backend, &p);
    assert_eq!((backend.units(), p.stats().reserved), (2, 33 * MIB));
    // `b` goes: its granules are free, but its unit holds `c`, so nothing goes back.
    p.free(b.handle).unwrap();
    assert_eq!(p.trim().unwrap(), 0);
    check(&backend, &p);
    // `a` goes: its unit is spare and goes back whole; `c`'s stays.
    p.free(a.handle).unwrap();
    assert_eq!(p.trim().unwrap(), 32 * MIB);
    check(&backend, &p);
    assert_eq!((backend.units(), p.stats().reserved), (1, MIB));
    assert_holds(&backend, &c, 3);
    release(&backend, &p, [c]);
}

/// Churn with random sizes on whole units, growths committed or extended: every call the pool
/// makes keeps to whole units (the backend refuses one that cuts a unit, and the pool would
/// fail), the invariants hold after every step, and live contents never change.
#[test]
fn churn_keeps_to_whole_units() {
    for (learned, extends) in [(true, false), (false, false), (true, true), (false, true)] {
        let backend = if extends {
            WholeUnits::extending()
        } else {
            WholeUnits::new()
        };
        let p = pool(&backend, learned);
        churn(&backend, &p, || check(&backend, &p));
        assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
    }
}
