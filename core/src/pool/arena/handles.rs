//! The units of memory of an arena with holes on a backend that gives memory back and moves it
//! only in the units it was backed in ([`InPlaceGrowth::whole_units`]: CUDA, where a unit is one
//! physical allocation, mapped from its start and unmapped whole).
//!
//! Holes per granule would make every granule its own allocation there: thousands of
//! `cuMemCreate`s on a large arena, against a handful for a caching allocator. So one call
//! that backs memory makes one unit (the arena's first size, a growth at its end, the commit
//! of a decommitted run a tensor lands on), and the pool tracks the units: a unit is *spare*
//! when all its granules lie in free space, and only spare units are given back or moved, whole.
//! A run a tensor lands on is backed by the largest spare units that fit inside it, moved, and
//! one new unit for the rest ([`holes`](super::holes)), so a large tensor costs one creation,
//! and learned placement ([`sites`](super::sites)) puts the next step's tensor back on its unit.
//! Past the pool's peak a request goes to the smallest spare unit that holds it instead, and a
//! run that needs new memory gives the smallest spare unit back first
//! ([`Handles::smallest`], [`Handles::take_smallest`]).
//!
//! The price is granularity: a unit a live tensor touches keeps all its memory, where per
//! granule the rest of it would be given back.

use std::collections::BTreeSet;

use super::units::Units;

#[cfg(doc)]
use crate::backend::InPlaceGrowth;

/// A granule's entry: the unit that holds it, and at a unit's first granule the unit itself.
#[derive(Clone, Copy, Debug)]
struct Cell {
    /// First granule of the unit that holds this one ([`FREE`]: none, the granule is not
    /// backed).
    unit: u64,
    /// At a unit's first granule: its length in granules, whether it is spare, and whether
    /// `spare` lists it (meaningless elsewhere).
    len: u64,
    spare: bool,
    listed: bool,
}

/// [`Cell::unit`] of a granule that no unit holds.
const FREE: u64 = u64::MAX;

impl Cell {
    const EMPTY: Cell = Cell {
        unit: FREE,
        len: 0,
        spare: false,
        listed: false,
    };
}

/// The units of an arena, in granules.
#[derive(Debug, Default)]
pub(super) struct Handles {
    /// One cell per granule of the extent, which names the unit holding it: the units a range
    /// touches are found by indexing, a step per unit (they were a `BTreeMap` range, whose two
    /// descents were a third of the holes path's time on every allocation and free that
    /// changed a granule's state). Units are disjoint and cover exactly the committed
    /// granules.
    cells: Vec<Cell>,
    /// The spare units as (length, first granule), and units that were spare since (listed
    /// once, unlisted when a lookup meets them): the largest that fits a run is one lookup,
    /// and a tensor that comes and goes on a unit flips its flag without touching the set
    /// (the set updates were half the whole-unit bookkeeping's time on the transformer traces).
    spare: BTreeSet<(u64, u64)>,
}

impl Handles {
    /// The unit that starts at granule `start`, if one does.
    fn unit_mut(&mut self, start: u64) -> Option<&mut Cell> {
        self.cells
            .get_mut(start as usize)
            .filter(|c| c.unit == start)
    }

    /// Granules `[start, start + len)` now belong to a unit at `start` (or to none, `FREE`).
    fn own(&mut self, start: u64, len: u64, unit: u64) {
        let end = (start + len) as usize;
        if self.cells.len() < end {
            self.cells.resize(end, Cell::EMPTY);
        }
        for c in &mut self.cells[start as usize..end] {
            c.unit = unit;
        }
    }

    /// Granules `[start, start + len)` were backed by one call: a new unit, not spare.
    pub(super) fn add(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.own(start, len, start);
            self.cells[start as usize] = Cell {
                unit: start,
                len,
                spare: false,
                listed: false,
            };
        }
    }

    /// Granules in `[a, b)` stopped being spare: the units they belong to are no longer spare.
    pub(super) fn unspare(&mut self, a: u64, b: u64) {
        let mut g = a;
        while let Some((unit, len)) = self.unit_from(g, b) {
            if let Some(u) = self.cells.get_mut(unit as usize) {
                u.spare = false;
            }
            g = unit + len;
        }
    }

    /// The first unit that holds a granule of `[g, b)`: its first granule and its length.
    fn unit_from(&self, mut g: u64, b: u64) -> Option<(u64, u64)> {
        while g < b {
            let unit = self.cells.get(g as usize)?.unit;
            if unit != FREE {
                return Some((unit, self.cells.get(unit as usize)?.len.max(1)));
            }
            g += 1;
        }
        None
    }

    /// Granules in `[a, b)` became spare (`spare` has them): the units they belong to whose
    /// granules are all spare now are spare units.
    pub(super) fn respare(&mut self, a: u64, b: u64, spare: &Units) {
        let mut g = a;
        while let Some((unit, len)) = self.unit_from(g, b) {
            g = unit + len;
            let Some(u) = self.cells.get_mut(unit as usize) else {
                return;
            };
            if !u.spare && spare.all(unit, unit + len) {
                u.spare = true;
                if !u.listed {
                    u.listed = true;
                    self.spare.insert((len, unit));
                }
            }
        }
    }

    /// Takes the unit at granule `start` of `len` out of the set, not spare.
    fn unlist(&mut self, len: u64, start: u64) {
        self.spare.remove(&(len, start));
        if let Some(u) = self.unit_mut(start) {
            u.spare = false;
            u.listed = false;
        }
    }

    /// Takes the largest spare unit of at most `n` granules that ends at or below granule
    /// `end`; returns its first granule and length. It stays a unit (at the same place) until
    /// [`Handles::moved`] or [`Handles::removed`]; [`Handles::untake`] makes it spare again.
    pub(super) fn take(&mut self, n: u64, end: u64) -> Option<(u64, u64)> {
        // Listed units no longer spare met on the way are unlisted.
        let mut stale = Vec::new();
        let cells = &self.cells;
        let found = self
            .spare
            .range(..(n, u64::MAX))
            .rev()
            .filter(|(len, start)| start + len <= end)
            .find(|(_, start)| still_spare(cells, *start, &mut stale))
            .copied();
        self.unlist_stale(stale);
        let (len, start) = found?;
        self.unlist(len, start);
        Some((start, len))
    }

    /// The smallest spare units of at least `n` granules, smallest first, at most `out.len()`
    /// of them (the rest of `out` is `None`), left spare: where a request placed on memory
    /// that is not there may go instead. Listed units no longer spare are unlisted on the way.
    pub(super) fn smallest(&mut self, n: u64, out: &mut [Option<(u64, u64)>]) {
        let mut stale = Vec::new();
        let cells = &self.cells;
        let spare = self
            .spare
            .range((n, 0)..)
            .filter(|(_, start)| still_spare(cells, *start, &mut stale));
        out.fill(None);
        for (slot, &(len, start)) in out.iter_mut().zip(spare) {
            *slot = Some((start, len));
        }
        self.unlist_stale(stale);
    }

    /// Unlists the listed units [`still_spare`] found no longer spare.
    fn unlist_stale(&mut self, stale: Vec<u64>) {
        for start in stale {
            if let Some(&mut Cell { len, .. }) = self.unit_mut(start) {
                self.unlist(len, start);
            }
        }
    }

    /// Takes the smallest spare unit (of at least one granule); returns its first granule and
    /// length, as [`Handles::take`] does.
    pub(super) fn take_smallest(&mut self) -> Option<(u64, u64)> {
        let mut one = [None];
        self.smallest(1, &mut one);
        let (start, len) = one[0]?;
        self.unlist(len, start);
        Some((start, len))
    }

    /// A unit taken by [`Handles::take`] was not moved or given back: it is spare again.
    pub(super) fn untake(&mut self, start: u64, len: u64) {
        if let Some(u) = self.unit_mut(start) {
            u.spare = true;
            u.listed = true;
            self.spare.insert((len, start));
        }
    }

    /// The unit at granule `from` now lies at granule `to` (its memory was moved).
    pub(super) fn moved(&mut self, from: u64, to: u64) {
        if let Some(&mut u) = self.unit_mut(from) {
            if u.listed {
                self.spare.remove(&(u.len, from));
            }
            self.own(from, u.len, FREE);
            self.add(to, u.len);
        }
    }

    /// The unit at granule `start` was given back.
    pub(super) fn removed(&mut self, start: u64) {
        if let Some(&mut u) = self.unit_mut(start) {
            if u.listed {
                self.spare.remove(&(u.len, start));
            }
            self.own(start, u.len, FREE);
        }
    }

    /// The extent ends at granule `len`: units past it are forgotten (a unit cut by the end,
    /// which the pool never asks for, is kept up to it).
    pub(super) fn truncate(&mut self, len: u64) {
        let Some(cut) = self.cells.get(len as usize..) else {
            return;
        };
        for (g, c) in (len..).zip(cut) {
            if c.unit == g && c.listed {
                self.spare.remove(&(c.len, g));
            }
        }
        self.cells.truncate(len as usize);
        let last = self.cells.last().map_or(FREE, |c| c.unit);
        if let Some(u) = self.unit_mut(last)
            && last + u.len > len
        {
            // Cut by the end (the pool never asks for it): it keeps its granules below.
            let (old, listed) = (u.len, u.listed);
            u.len = len - last;
            if listed {
                self.spare.remove(&(old, last));
                self.spare.insert((len - last, last));
            }
        }
    }

    /// The first unit boundary at or after granule `g`: `g` itself unless a unit holds it and
    /// the granule before it, then that unit's end.
    pub(super) fn boundary(&self, g: u64) -> u64 {
        let Some(before) = g.checked_sub(1).and_then(|p| self.cells.get(p as usize)) else {
            return g;
        };
        match self.cells.get(before.unit as usize) {
            Some(u) if before.unit != FREE && before.unit + u.len > g => before.unit + u.len,
            _ => g,
        }
    }

    /// Units in all.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        (0..).zip(&self.cells).filter(|(g, c)| c.unit == *g).count()
    }

    /// The units are disjoint, cover exactly the `committed` granules, and the spare ones are
    /// exactly those whose granules are all `spare`; every granule names the unit holding it.
    pub(super) fn check(&self, committed: &Units, spare: &Units) -> Result<(), String> {
        let mut end = 0;
        let mut covered = 0;
        let mut listed = 0;
        for (s, c) in (0u64..).zip(&self.cells) {
            if c.unit == FREE {
                continue;
            }
            if c.unit != s {
                // Inside a unit: the check of the unit's own granules below covers it.
                if c.unit > s || s >= end {
                    return Err(format!("granule {s} names the unit at {}", c.unit));
                }
                continue;
            }
            let u = c;
            let n = u.len;
            if s < end || n == 0 {
                return Err(format!(
                    "unit at granule {s} of {n} overlaps the one before"
                ));
            }
            let own = self.cells.get(s as usize..(s + n) as usize);
            if !own.is_some_and(|cells| cells.iter().all(|c| c.unit == s)) {
                return Err(format!(
                    "unit at granule {s} of {n}: not all its granules name it"
                ));
            }
            if committed.count(s, s + n) != n {
                return Err(format!(
                    "unit at granule {s} of {n} has decommitted granules"
                ));
            }
            let is_spare = spare.count(s, s + n) == n;
            let in_set = self.spare.contains(&(n, s));
            if is_spare != u.spare || in_set != u.listed || (u.spare && !u.listed) {
                return Err(format!(
                    "unit at granule {s} of {n}: spare {is_spare}, flagged {}, listed {in_set}",
                    u.spare
                ));
            }
            end = s + n;
            covered += n;
            listed += usize::from(u.listed);
        }
        if covered != committed.ones() || self.spare.len() != listed {
            return Err(format!(
                "units cover {covered} granules of {} committed; {} listed of {listed}",
                committed.ones(),
                self.spare.len()
            ));
        }
        Ok(())
    }
}

/// Whether the unit listed at granule `start` is still a spare unit there (the list is updated
/// lazily); if not, `start` goes to `stale` for [`Handles::unlist_stale`].
fn still_spare(cells: &[Cell], start: u64, stale: &mut Vec<u64>) -> bool {
    let spare = cells
        .get(start as usize)
        .is_some_and(|c| c.unit == start && c.spare);
    if !spare {
        stale.push(start);
    }
    spare
}

#[cfg(test)]
mod tests;
