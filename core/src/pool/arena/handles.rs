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
//!
//! The price is granularity: a unit a live tensor touches keeps all its memory, where per
//! granule the rest of it would be given back.

use std::collections::{BTreeMap, BTreeSet};

use super::units::Units;

#[cfg(doc)]
use crate::backend::InPlaceGrowth;

/// One unit: its length in granules, whether it is spare, and whether `spare` lists it.
#[derive(Clone, Copy, Debug)]
struct Unit {
    len: u64,
    spare: bool,
    listed: bool,
}

/// The units of an arena, in granules.
#[derive(Debug, Default)]
pub(super) struct Handles {
    /// Each unit by its first granule. Units are disjoint and cover exactly the committed
    /// granules.
    units: BTreeMap<u64, Unit>,
    /// The spare units as (length, first granule), and units that were spare since (listed
    /// once, unlisted when a lookup meets them): the largest that fits a run is one lookup,
    /// and a tensor that comes and goes on a unit flips its flag without touching the set
    /// (the set updates were half the whole-unit bookkeeping's time on the transformer traces).
    spare: BTreeSet<(u64, u64)>,
}

impl Handles {
    /// Granules `[start, start + len)` were backed by one call: a new unit, not spare.
    pub(super) fn add(&mut self, start: u64, len: u64) {
        if len > 0 {
            let unit = Unit {
                len,
                spare: false,
                listed: false,
            };
            self.units.insert(start, unit);
        }
    }

    /// Granules in `[a, b)` stopped being spare: the units they belong to are no longer spare.
    pub(super) fn unspare(&mut self, a: u64, b: u64) {
        for (s, u) in self.units.range_mut(..b).rev() {
            if s + u.len <= a {
                break;
            }
            u.spare = false;
        }
    }

    /// Granules in `[a, b)` became spare (`spare` has them): the units they belong to whose
    /// granules are all spare now are spare units.
    pub(super) fn respare(&mut self, a: u64, b: u64, spare: &Units) {
        for (s, u) in self.units.range_mut(..b).rev() {
            if s + u.len <= a {
                break;
            }
            if !u.spare && spare.count(*s, s + u.len) == u.len {
                u.spare = true;
                if !u.listed {
                    u.listed = true;
                    self.spare.insert((u.len, *s));
                }
            }
        }
    }

    /// Takes the unit at granule `start` of `len` out of the set, not spare.
    fn unlist(&mut self, len: u64, start: u64) {
        self.spare.remove(&(len, start));
        if let Some(u) = self.units.get_mut(&start) {
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
        let found = self
            .spare
            .range(..(n, u64::MAX))
            .rev()
            .filter(|(len, start)| start + len <= end)
            .find(|(_, start)| {
                let spare = self.units.get(start).is_some_and(|u| u.spare);
                if !spare {
                    stale.push(*start);
                }
                spare
            })
            .copied();
        for start in stale {
            if let Some(&Unit { len, .. }) = self.units.get(&start) {
                self.unlist(len, start);
            }
        }
        let (len, start) = found?;
        self.unlist(len, start);
        Some((start, len))
    }

    /// A unit taken by [`Handles::take`] was not moved or given back: it is spare again.
    pub(super) fn untake(&mut self, start: u64, len: u64) {
        if let Some(u) = self.units.get_mut(&start) {
            u.spare = true;
            u.listed = true;
            self.spare.insert((len, start));
        }
    }

    /// The unit at granule `from` now lies at granule `to` (its memory was moved).
    pub(super) fn moved(&mut self, from: u64, to: u64) {
        if let Some(u) = self.units.remove(&from) {
            if u.listed {
                self.spare.remove(&(u.len, from));
            }
            let unit = Unit {
                spare: false,
                listed: false,
                ..u
            };
            self.units.insert(to, unit);
        }
    }

    /// The unit at granule `start` was given back.
    pub(super) fn removed(&mut self, start: u64) {
        if let Some(u) = self.units.remove(&start) {
            if u.listed {
                self.spare.remove(&(u.len, start));
            }
        }
    }

    /// The extent ends at granule `len`: units past it are forgotten (a unit cut by the end,
    /// which the pool never asks for, is kept up to it).
    pub(super) fn truncate(&mut self, len: u64) {
        let cut = self.units.split_off(&len);
        if let Some((s, u)) = self.units.iter_mut().next_back() {
            if s + u.len > len {
                // Cut by the end (the pool never asks for it): it keeps its granules below.
                if u.listed {
                    self.spare.remove(&(u.len, *s));
                    self.spare.insert((len - s, *s));
                }
                u.len = len - s;
            }
        }
        for (s, u) in cut {
            if u.listed {
                self.spare.remove(&(u.len, s));
            }
        }
    }

    /// The first unit boundary at or after granule `g`: `g` itself unless a unit holds it and
    /// the granule before it, then that unit's end.
    pub(super) fn boundary(&self, g: u64) -> u64 {
        match self.units.range(..g).next_back() {
            Some((s, u)) if s + u.len > g => s + u.len,
            _ => g,
        }
    }

    /// Units in all.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.units.len()
    }

    /// The units are disjoint, cover exactly the `committed` granules, and the spare ones are
    /// exactly those whose granules are all `spare`.
    pub(super) fn check(&self, committed: &Units, spare: &Units) -> Result<(), String> {
        let mut end = 0;
        let mut covered = 0;
        let mut listed = 0;
        for (&s, u) in &self.units {
            let n = u.len;
            if s < end || n == 0 {
                return Err(format!(
                    "unit at granule {s} of {n} overlaps the one before"
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

#[cfg(test)]
mod tests;
