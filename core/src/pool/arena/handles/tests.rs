//! The units' bookkeeping alone, then the arena on a backend that takes memory back only in
//! whole units (the host behind a model of CUDA's physical allocations, which refuses any range
//! that cuts one): one creation per backed run, whole units moved and given back, contents kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::backend::{Backend, BlockDesc, BlockId, BlockRange, Growable, InPlaceGrowth};
use crate::host::{HostBackend, HostConfig};
use crate::pool::arena::sites::HISTORY;
use crate::pool::{Allocation, ArenaConfig, ArenaPool, DevicePool};
use crate::{Error, Result};

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

/// A model of CUDA's physical allocations over the host: one unit per call that backs memory,
/// and a range that cuts a unit refused (as `cuMemUnmap` refuses part of a mapping).
struct WholeUnits {
    host: HostBackend,
    /// The one reserved block's extent and its units (size by offset).
    state: Mutex<(u64, BTreeMap<u64, u64>)>,
    /// Units created (`cuMemCreate`).
    created: AtomicU64,
    /// Units moved by `remap_range`.
    moved: AtomicU64,
    /// Whether it offers `extend_block` (CUDA does; without it the pool commits each growth).
    extends: bool,
}

impl WholeUnits {
    fn new() -> Arc<Self> {
        Self::with(false)
    }

    /// One that extends its block without memory, as CUDA does.
    fn extending() -> Arc<Self> {
        Self::with(true)
    }

    fn with(extends: bool) -> Arc<Self> {
        Arc::new(WholeUnits {
            host: HostBackend::new(HostConfig::default()).unwrap(),
            state: Mutex::new((0, BTreeMap::new())),
            created: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            extends,
        })
    }

    /// The units inside `[offset, offset + size)`; an error when one is cut.
    fn inside(units: &BTreeMap<u64, u64>, offset: u64, size: u64) -> Result<Vec<(u64, u64)>> {
        let cut = |at: u64| {
            units
                .range(..at)
                .next_back()
                .is_some_and(|(o, n)| o + n > at)
        };
        if cut(offset) || cut(offset + size) {
            return Err(Error::invalid(format!(
                "[{offset}, {}) cuts a unit",
                offset + size
            )));
        }
        Ok(units
            .range(offset..offset + size)
            .map(|(o, n)| (*o, *n))
            .collect())
    }

    fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    fn units(&self) -> usize {
        self.state.lock().unwrap().1.len()
    }
}

impl crate::backend::BackendAdaptor for WholeUnits {
    type Inner = HostBackend;
    fn inner(&self) -> &HostBackend {
        &self.host
    }
    fn extensions(&self) -> crate::backend::Extensions<'_> {
        crate::backend::Extensions {
            growable: self
                .host
                .extensions()
                .growable
                .map(|_| self as &dyn Growable),
            ..crate::backend::Extensions::default()
        }
    }
}

impl Growable for WholeUnits {
    fn in_place_growth(&self) -> InPlaceGrowth {
        let g = self.host.in_place_growth();
        InPlaceGrowth {
            granularity: G,
            max_reserve: g.max_reserve / G * G,
            whole_units: true,
            ..g
        }
    }
    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        let id = self.host.reserve_block(desc, reserve)?;
        let mut st = self.state.lock().unwrap();
        *st = (desc.size, BTreeMap::new());
        if desc.size > 0 {
            st.1.insert(0, desc.size);
            self.created.fetch_add(1, Ordering::Relaxed);
        }
        Ok(id)
    }
    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let mut st = self.state.lock().unwrap();
        let (extent, units) = &mut *st;
        if size > *extent {
            self.host.resize_block(block, size)?;
            units.insert(*extent, size - *extent);
            self.created.fetch_add(1, Ordering::Relaxed);
            *extent = size;
            return Ok(size);
        }
        // The unit that holds the new end stays whole.
        let now = match units.range(..size).next_back() {
            Some((o, n)) if o + n > size => o + n,
            _ => size,
        };
        units.split_off(&now);
        *extent = now;
        self.host.resize_block(block, now)
    }
    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        if !self.extends {
            return Err(Error::Unsupported {
                backend: "whole units",
                what: "extend_block".into(),
            });
        }
        let mut st = self.state.lock().unwrap();
        self.host.extend_block(block, size)?;
        st.0 = size;
        Ok(())
    }
    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        for (o, _) in Self::inside(&st.1, offset, size)? {
            st.1.remove(&o);
        }
        self.host.decommit_range(block, offset, size)
    }
    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        if !Self::inside(&st.1, offset, size)?.is_empty() {
            return Err(Error::invalid("commit_range over memory"));
        }
        self.host.commit_range(block, offset, size)?;
        st.1.insert(offset, size);
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let src = Self::inside(&st.1, from, size)?;
        if src.iter().map(|u| u.1).sum::<u64>() != size
            || !Self::inside(&st.1, to, size)?.is_empty()
        {
            return Err(Error::invalid("remap_range: not memory to a hole"));
        }
        self.host.remap_range(block, from, to, size)?;
        for (o, n) in &src {
            st.1.remove(o);
            st.1.insert(to + (o - from), *n);
        }
        self.moved.fetch_add(src.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A pool over `backend` through the validating front, learned placement on or off.
fn pool(backend: &Arc<WholeUnits>, learned: bool) -> ArenaPool {
    let front = Arc::new(crate::Validated::new(backend.clone()));
    let config = ArenaConfig {
        learned_placement: learned,
        ..ArenaConfig::device()
    };
    ArenaPool::new(front, config).unwrap()
}

/// Allocates and fills with `byte`.
fn filled(backend: &WholeUnits, p: &ArenaPool, size: u64, byte: u8) -> Allocation {
    let a = p.allocate(size, 256, "t").unwrap();
    let data = vec![byte; size as usize];
    backend
        .write_mapped(a.range.block, a.range.offset, &data)
        .unwrap();
    a
}

fn assert_holds(backend: &WholeUnits, a: &Allocation, byte: u8) {
    let BlockRange {
        block,
        offset,
        size,
    } = a.range;
    let mut out = vec![0u8; size as usize];
    backend.read_mapped(block, offset, &mut out).unwrap();
    assert!(
        out.iter().all(|b| *b == byte),
        "contents of a live tensor changed"
    );
}

/// The pool's invariants (its units among them) hold, its committed bytes are the backend's,
/// and it counts as many units as the backend holds.
fn check(backend: &WholeUnits, p: &ArenaPool) {
    p.check_invariants().unwrap();
    assert_eq!(p.stats().reserved, backend.host.block_bytes());
    let st = p.state.lock().unwrap();
    if let Some(h) = st
        .arena
        .and_then(|i| st.blocks[i].as_ref())
        .and_then(|b| b.holes.as_ref())
    {
        assert_eq!(h.unit_count(), Some(backend.units()));
    }
}

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
    for a in [pin, top, again] {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
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
        let mut st = p.state.lock().unwrap();
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
    for a in pins {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
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
        for x in [b, d, e] {
            p.free(x.handle).unwrap();
        }
        p.trim().unwrap();
        assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
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
    p.free(c.handle).unwrap();
    p.trim().unwrap();
    assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
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
        let mut live: Vec<(Allocation, u8)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..400u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if live.len() > 12 || (x.is_multiple_of(3) && !live.is_empty()) {
                let (a, byte) = live.swap_remove((x as usize / 3) % live.len());
                assert_holds(&backend, &a, byte);
                p.free(a.handle).unwrap();
            } else {
                let size = (4 * KIB) << (x % 10);
                let byte = (step % 250) as u8 + 1;
                live.push((
                    filled(&backend, &p, size + (x >> 40) % 4096 * 4, byte),
                    byte,
                ));
            }
            if step % 50 == 0 {
                p.trim().unwrap();
            }
            check(&backend, &p);
        }
        for (a, byte) in live {
            assert_holds(&backend, &a, byte);
            p.free(a.handle).unwrap();
        }
        p.trim().unwrap();
        assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
    }
}

/// Learned placement on whole units: a site whose place was held once lands somewhere
/// transient, and when both places are free again it goes back to the first one (per granule
/// it would follow the transient place, `sites`).
#[test]
fn a_site_whose_place_was_held_goes_back_to_its_first_place() {
    let backend = WholeUnits::new();
    let p = pool(&backend, true);
    let temporaries = |p: &ArenaPool| {
        for _ in 0..HISTORY / 2 {
            let t = p.allocate(64 * KIB, 256, "t").unwrap();
            p.free(t.handle).unwrap();
        }
    };
    temporaries(&p);
    let a = p.allocate(MIB, 256, "a").unwrap();
    let at = a.range.offset;
    p.free(a.handle).unwrap();
    // Held once: the site lands elsewhere, a transient place.
    let pin = filled(&backend, &p, MIB, 1);
    assert_eq!(pin.range.offset, at, "TLSF reuses the hole");
    temporaries(&p);
    let b = p.allocate(MIB, 256, "b").unwrap();
    assert_ne!(b.range.offset, at);
    for x in [pin, b] {
        p.free(x.handle).unwrap();
    }
    // Both places are free again: the site goes where it went first.
    temporaries(&p);
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
fn pinned(backend: &WholeUnits, p: &ArenaPool, kib: &[u64], first: u8) -> Vec<Allocation> {
    let mut held = Vec::new();
    for (i, k) in kib.iter().enumerate() {
        held.push(filled(backend, p, k * KIB, first + i as u8));
        held.push(filled(backend, p, 64 * KIB, 100 + first + i as u8));
    }
    held
}

/// 64 KiB, 6.5 MiB and 12 MiB tensors pinned apart, then the 6.5 MiB one freed and trimmed: a
/// hole without memory, where every place TLSF offers a 1.5 MiB request lies. The rest, held.
fn hole_without_memory(backend: &WholeUnits, p: &ArenaPool) -> Vec<Allocation> {
    let mut held = pinned(backend, p, &[64, 6656, 12288], 10);
    p.free(held.remove(2).handle).unwrap();
    assert!(p.trim().unwrap() >= 6 * MIB);
    held
}

/// Units the backend created, moves it made, and the pool's committed bytes.
fn counts(backend: &WholeUnits, p: &ArenaPool) -> (u64, u64, u64) {
    (backend.created(), backend.moved(), p.stats().reserved)
}

/// Frees `live`, trims, and checks that nothing is left in the pool or the backend.
fn release(backend: &WholeUnits, p: &ArenaPool, live: impl IntoIterator<Item = Allocation>) {
    for a in live {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
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
