//! Where requests go on whole units: a learned site's first place, the smallest spare unit that
//! holds a run, and requests past the pool's peak.

use super::whole_units::{WholeUnits, check, pool, release};
use super::*;
use crate::pool::arena::testing::{assert_holds, filled, temporaries};

/// Learned placement on whole units: a site whose place was held once lands somewhere
/// transient, and when both places are free again it goes back to the first one (per granule
/// it would follow the transient place, `sites`).
#[test]
fn a_site_whose_place_was_held_goes_back_to_its_first_place() {
    let backend = WholeUnits::new();
    let p = pool(&backend, true);
    temporaries(&p, HISTORY / 2);
    let a = p.allocate(MIB, 256, "a").unwrap();
    let at = a.range.offset;
    p.free(a.handle).unwrap();
    // Held once: the site lands elsewhere, a transient place.
    let pin = filled(&backend, &p, MIB, 1);
    assert_eq!(pin.range.offset, at, "TLSF reuses the hole");
    temporaries(&p, HISTORY / 2);
    let b = p.allocate(MIB, 256, "b").unwrap();
    assert_ne!(b.range.offset, at);
    for x in [pin, b] {
        p.free(x.handle).unwrap();
    }
    // Both places are free again: the site goes where it went first.
    temporaries(&p, HISTORY / 2);
    let c = p.allocate(MIB, 256, "c").unwrap();
    assert_eq!(c.range.offset, at, "the transient place replaced the first");
    p.free(c.handle).unwrap();
    check(&backend, &p);
}

#[test]
fn the_smallest_spare_units_that_hold_a_run_come_first() {
    let mut h = units(&[(0, 3), (3, 5), (8, 2), (10, 6)]);
    let mut spare = bits(16, &[(0, 16)]);
    h.respare(0, 16, &spare);
    let mut out = [None; 3];
    // At least 3 granules: the units of 3, 5 and 6, smallest first, left spare.
    h.smallest(3, &mut out);
    assert_eq!(out, [Some((0, 3)), Some((3, 5)), Some((10, 6))]);
    // At least 4: two of them; a unit held since it was listed is passed over and unlisted.
    spare.clear(4, 5);
    h.unspare(4, 5);
    h.smallest(4, &mut out);
    assert_eq!(out, [Some((10, 6)), None, None]);
    h.check(&bits(16, &[(0, 16)]), &spare).unwrap();
    // The smallest of all is taken to be given back: the unit of 2, then the one of 3.
    assert_eq!(h.take_smallest(), Some((8, 2)));
    assert_eq!(h.take_smallest(), Some((0, 3)));
}

/// Tensors of `kib` KiB, each committed by a growth of its own, with a small pin after each
/// (so no two of their holes join).
fn pinned(backend: &Arc<WholeUnits>, p: &ArenaPool, kib: &[u64], first: u8) -> Vec<Allocation> {
    let mut held = Vec::new();
    for (i, k) in kib.iter().enumerate() {
        held.push(filled(backend, p, k * KIB, first + i as u8));
        held.push(filled(backend, p, 64 * KIB, 100 + first + i as u8));
    }
    held
}

/// 64 KiB, 6.5 MiB and 12 MiB tensors pinned apart, then the 6.5 MiB one freed and trimmed: a
/// hole without memory, where every place TLSF offers a 1.5 MiB request lies. The rest, held.
fn hole_without_memory(backend: &Arc<WholeUnits>, p: &ArenaPool) -> Vec<Allocation> {
    let mut held = pinned(backend, p, &[64, 6656, 12288], 10);
    p.free(held.remove(2).handle).unwrap();
    assert!(p.trim().unwrap() >= 6 * MIB);
    held
}

/// Units the backend created, moves it made, and the pool's committed bytes.
fn counts(backend: &WholeUnits, p: &ArenaPool) -> (u64, u64, u64) {
    (backend.created(), backend.moved(), p.stats().reserved)
}

/// Past its allowance and its peak, a request whose place lacks memory goes to the smallest
/// spare unit that holds it: no new memory, no move (new memory would have left both spare
/// units idle beside it).
#[test]
fn past_the_peak_a_request_off_memory_goes_to_the_smallest_spare_unit_that_holds_it() {
    let backend = WholeUnits::new();
    let p = pool(&backend, false);
    let mut held = hole_without_memory(&backend, &p);
    // An 8 MiB tensor grows the arena at its end to its peak; then it and the 12 MiB one go:
    // two spare units.
    let c = filled(&backend, &p, 8 * MIB, 30);
    let c_at = c.range.offset;
    p.free(c.handle).unwrap();
    p.free(held.remove(3).handle).unwrap();
    check(&backend, &p);
    let (created, moved, reserved) = counts(&backend, &p);
    assert_eq!(reserved, p.stats().peak_reserved);
    // 1.5 MiB: TLSF's places are in the hole, without memory; the 8 MiB tensor's unit holds
    // it, and is smaller than the 12 MiB one's.
    let x = filled(&backend, &p, 3 * MIB / 2, 40);
    check(&backend, &p);
    assert!(
        x.range.offset >= c_at && x.range.offset + x.range.size <= c_at + 8 * MIB,
        "placed at {} (the 8 MiB unit at {c_at})",
        x.range.offset
    );
    assert_eq!(counts(&backend, &p), (created, moved, reserved));
    assert_holds(&backend, &x, 40);
    release(&backend, &p, std::iter::once(x).chain(held));
}

/// Past its allowance and its peak, a request whose place lacks memory and which no spare unit
/// holds goes to free committed granules of a unit a live tensor holds: no new memory (Llama-8B
/// prefill at 2 MiB made a unit for a 4 MiB tensor while two 56 MiB units held one tensor of
/// 4 MiB each, and peaked there).
#[test]
fn past_the_peak_a_request_no_spare_unit_holds_goes_to_the_free_part_of_a_held_unit() {
    let backend = WholeUnits::new();
    let p = pool(&backend, false);
    let mut held = hole_without_memory(&backend, &p);
    // An 8 MiB tensor grows the arena at its end to its peak and stays; the 12 MiB one goes:
    // one spare unit.
    let c = filled(&backend, &p, 8 * MIB, 30);
    let y = held.remove(3);
    let y_at = y.range.offset;
    p.free(y.handle).unwrap();
    check(&backend, &p);
    let (created, moved, reserved) = counts(&backend, &p);
    assert_eq!(reserved, p.stats().peak_reserved);
    // The first 1.5 MiB goes to the spare 12 MiB unit; the second finds no spare unit, but the
    // rest of that unit is free and committed.
    let a = filled(&backend, &p, 3 * MIB / 2, 40);
    let b = filled(&backend, &p, 3 * MIB / 2, 41);
    check(&backend, &p);
    for x in [&a, &b] {
        assert!(
            x.range.offset >= y_at && x.range.offset + x.range.size <= y_at + 12 * MIB,
            "placed at {} (the 12 MiB unit at {y_at})",
            x.range.offset
        );
    }
    assert_eq!(counts(&backend, &p), (created, moved, reserved));
    assert_holds(&backend, &a, 40);
    assert_holds(&backend, &b, 41);
    assert_holds(&backend, &c, 30);
    release(&backend, &p, [a, b, c].into_iter().chain(held));
}

/// Past its allowance and its peak, a run no spare unit fits gives a spare unit back before
/// new memory is made for it: the pool's committed bytes fall instead of rising.
#[test]
fn past_the_peak_a_spare_unit_goes_back_before_new_memory() {
    let backend = WholeUnits::new();
    let p = pool(&backend, false);
    let pin = filled(&backend, &p, 64 * KIB, 1);
    let mut held = pinned(&backend, &p, &[2048, 2560, 3072], 10);
    // The 3 MiB tensor goes and trim gives its unit back; then the 2 and 2.5 MiB ones go:
    // two spare units.
    p.free(held.remove(4).handle).unwrap();
    assert!(p.trim().unwrap() >= 3 * MIB - 3 * G);
    p.free(held.remove(2).handle).unwrap();
    p.free(held.remove(0).handle).unwrap();
    // A 4 MiB tensor grows the arena to its peak (neither spare unit is as small as what
    // the growth takes past the allowance, so both stay).
    let e = filled(&backend, &p, 4 * MIB, 50);
    check(&backend, &p);
    let (created, moved, reserved) = counts(&backend, &p);
    assert_eq!(reserved, p.stats().peak_reserved);
    // 2.75 MiB lands in the 3 MiB hole: the 2.5 MiB tensor's unit is moved there, and the
    // few granules left get new memory after the 2 MiB tensor's unit, which fits neither
    // the request nor the rest, went back.
    let x = filled(&backend, &p, 2816 * KIB, 40);
    check(&backend, &p);
    assert_eq!(
        (backend.created(), backend.moved()),
        (created + 1, moved + 1)
    );
    assert!(
        p.stats().reserved + MIB < reserved,
        "{} committed after {reserved}",
        p.stats().reserved
    );
    assert_holds(&backend, &x, 40);
    assert_holds(&backend, &e, 50);
    release(&backend, &p, [x, e, pin].into_iter().chain(held));
}

/// A trimmed pool growing again under its old peak (past its allowance) keeps a small
/// request where TLSF put it, on new memory: the large spare unit is left for the large
/// tensors that made the peak (the replay pool's dynamic pool on `xfmr_eager` at 2 MiB put
/// 4 MB tensors in the step's 64 MB units, and then grew by two units for those tensors).
#[test]
fn under_its_old_peak_a_pool_keeps_a_small_request_out_of_a_large_spare_unit() {
    let backend = WholeUnits::new();
    let p = pool(&backend, false);
    let mut held = pinned(&backend, &p, &[64, 8192], 10);
    // An 8 MiB tensor goes; a 9 MiB one grows the arena beside its spare unit, far past the
    // allowance (the unit is larger than what the growth takes past it, so it stays): the
    // peak.
    p.free(held.remove(2).handle).unwrap();
    let z = filled(&backend, &p, 9 * MIB, 20);
    let peak = p.stats().peak_reserved;
    // Trim gives back the 8 MiB unit, then the 9 MiB tensor goes: its unit is spare.
    assert!(p.trim().unwrap() >= 8 * MIB - G);
    let z_at = z.range.offset;
    p.free(z.handle).unwrap();
    check(&backend, &p);
    let created = backend.created();
    // 1 MiB lands in the 8 MiB hole (every place TLSF offers is there): past the allowance
    // (the live peak was about 9 MiB) but under the peak, so it gets new memory there.
    let x = filled(&backend, &p, MIB, 40);
    check(&backend, &p);
    assert!(
        x.range.offset + x.range.size <= z_at,
        "placed in the spare unit at {z_at}"
    );
    assert_eq!(backend.created(), created + 1);
    assert_eq!(p.stats().peak_reserved, peak);
    // The 9 MiB unit is still spare: trim gives it back.
    assert!(p.trim().unwrap() >= 9 * MIB - 8 * G);
    assert_holds(&backend, &x, 40);
    release(&backend, &p, std::iter::once(x).chain(held));
}
