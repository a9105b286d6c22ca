//! Committed memory that follows the live bytes: the arena that grows in place gives the memory
//! of its free holes back and moves it where tensors need it, on a backend with
//! [`InPlaceGrowth::holes`] (the host through `madvise`, CUDA by remapping its physical
//! allocations).
//!
//! Placed before their lifetimes are known, tensors strand free holes inside the arena (see
//! [`in_place`](super::in_place)). Address space costs nothing, so the holes stay where they
//! are while their memory does not:
//!
//! * **Spare granules.** A committed granule wholly in free space is *spare*; frees and
//!   allocations keep the set current, a bitmap word of 64 granules at a time.
//! * **Moved, not re-created.** A region placed on decommitted granules gets the memory of spare
//!   granules elsewhere ([`Growable::remap_range`]; per granule the longest-spare first), and
//!   new memory ([`Growable::commit_range`]) only while the pool stays within its allowance (the
//!   live peak plus [`ALLOWANCE_DIVISOR`]⁻¹ of it) or when nothing is spare.
//! * **Given back under pressure only.** A free never calls the backend: holes filled again soon
//!   cost nothing. Before the arena grows at its end, spare granules below its free tail are
//!   decommitted, as many as the growth adds ([`Growable::decommit_range`]); trim and the
//!   runtime's pressure path decommit all of them.
//! * **Whole units** ([`InPlaceGrowth::whole_units`], CUDA: a physical allocation is mapped and
//!   unmapped whole). Memory goes back and moves in the units it was made in
//!   ([`handles`](super::handles)). Past both the allowance and the pool's peak, a request whose
//!   place lacks memory goes to the smallest spare unit that holds it, else to a run of spare
//!   granules inside a held unit ([`SPARE_UNIT_TRIES`] each), and a run that still needs new
//!   memory first gives the smallest spare unit back. Sites keep their first place and follow
//!   moved memory ([`sites`](super::sites)).
//!
//! Invariants (checked by the pool's `check_invariants`): spare granules are committed;
//! a held region lies on committed, non-spare granules; every committed granule wholly in free
//! space is spare; with whole units, the units agree with both bitmaps. Committed bytes (the
//! pool's `reserved`) are the granules that held live bytes at their peak plus the growth step's
//! slack. The granule is the backend's, at least [`MIN_GRANULE`] where granules go alone.
//!
//! Costs: a free touches only the bitmap words of its own region; an allocation that lands on
//! committed granules (the usual case once placement is learned) one range check; one that lacks
//! memory up to [`PROBES`] more TLSF places, then a remap or commit per run of decommitted
//! granules (with whole units, one physical allocation per commit). Measurements are in
//! `docs/performance.md` ("Arena with holes"); designs not kept, in `docs/decisions/holes-*.md`.

use std::collections::VecDeque;

use super::handles::Handles;
use super::units::Units;
use crate::suballoc::Region;

#[cfg(doc)]
use crate::backend::{Growable, InPlaceGrowth};

mod check;

/// The arena holds up to its live peak plus this fraction of it before it moves memory: free
/// memory under that is kept where it is (a later tensor placed there costs no driver call), and
/// the peak stays within about 3 % of the live one, the growth step's bound.
pub const ALLOWANCE_DIVISOR: u64 = 32;

/// The smallest granule an arena gives back and moves: 64 KiB. The host's 4 KiB pages peak no
/// lower and cost several times the time per allocation where a tensor spans thousands of pages
/// (`docs/decisions/holes-granule.md`).
pub const MIN_GRANULE: u64 = 64 << 10;

/// Places TLSF offers a request that lands on decommitted granules, beyond the first.
pub(super) const PROBES: usize = 3;

/// Spare units a request past the pool's peak is tried in, smallest first (with whole units):
/// a unit whose free block TLSF does not find near the request's place is passed over. As many
/// runs of spare granules are tried after them, in address order.
pub(super) const SPARE_UNIT_TRIES: usize = 4;

/// Which granules of an arena with holes hold memory, and which of those are spare.
#[derive(Debug)]
pub(super) struct Holes {
    /// log2 of the granule.
    pub(in crate::pool::arena) shift: u32,
    /// Granules of the committed extent that are backed by memory.
    pub(in crate::pool::arena) committed: Units,
    /// Committed granules wholly in free space: memory the arena may move or give back.
    pub(in crate::pool::arena) spare: Units,
    /// Granule ranges that became spare, oldest first (entries go stale as granules are taken;
    /// the bitmap decides): memory is moved from the holes that have been free the longest,
    /// not from those just freed, where the next tensors of a step are likely placed.
    pub(in crate::pool::arena) queue: VecDeque<(u64, u64)>,
    /// The units memory goes back and moves in, on a backend that takes only whole ones
    /// ([`handles`](super::handles)); `None` where any granule goes alone.
    pub(in crate::pool::arena) handles: Option<Handles>,
}

impl Holes {
    /// An extent of `extent` bytes on a backend of `granularity` (a power of two), all
    /// committed and none spare, in units that go only whole when `whole_units`
    /// ([`InPlaceGrowth::whole_units`]). The arena's granule is the backend's, at least
    /// [`MIN_GRANULE`] where granules go alone; the part of the extent past its last whole
    /// granule is never given back. (With whole units the granule is the backend's own, so
    /// every extent is whole granules and no unit ends inside one.)
    pub(super) fn new(granularity: u64, extent: u64, whole_units: bool) -> Self {
        let granule = if whole_units {
            granularity
        } else {
            granularity.max(MIN_GRANULE)
        };
        let mut h = Holes {
            shift: granule.trailing_zeros(),
            committed: Units::default(),
            spare: Units::default(),
            queue: VecDeque::new(),
            handles: whole_units.then(Handles::default),
        };
        h.resize(extent);
        h
    }

    /// Whether memory goes back and moves only in whole units.
    pub(super) fn whole_units(&self) -> bool {
        self.handles.is_some()
    }

    /// The extent grows to `extent` bytes without memory ([`Growable::extend_block`]): the
    /// granules added are decommitted.
    pub(super) fn extend(&mut self, extent: u64) {
        let len = extent >> self.shift;
        self.committed.resize(len, false);
        self.spare.resize(len, false);
    }

    /// Bytes of the extent not backed by memory.
    pub(super) fn decommitted(&self) -> u64 {
        (self.committed.len() - self.committed.ones()) << self.shift
    }

    /// The arena's granule in bytes.
    pub(super) fn granule(&self) -> u64 {
        1 << self.shift
    }

    /// The extent becomes `extent` bytes: granules added are committed (growth maps memory, as
    /// one unit), granules removed are forgotten.
    pub(super) fn resize(&mut self, extent: u64) {
        let (old, len) = (self.committed.len(), extent >> self.shift);
        self.committed.resize(len, true);
        self.spare.resize(len, false);
        if let Some(u) = self.handles.as_mut() {
            if len > old {
                u.add(old, len - old);
            } else {
                u.truncate(len);
            }
        }
    }

    /// The first byte at or after `offset` where no unit is cut in two (`offset` itself where
    /// granules go alone): where a shrink may end.
    pub(super) fn unit_boundary(&self, offset: u64) -> u64 {
        match self.handles.as_ref() {
            Some(u) if offset.is_multiple_of(self.granule()) => {
                u.boundary(offset >> self.shift) << self.shift
            }
            _ => offset,
        }
    }

    /// Units of memory, where they go only whole (`None` elsewhere).
    #[cfg(test)]
    pub(super) fn unit_count(&self) -> Option<usize> {
        self.handles.as_ref().map(Handles::count)
    }

    /// `[offset, offset + size)` became (part of) the free block of the same extent: its whole
    /// committed granules are spare.
    pub(super) fn freed(&mut self, offset: u64, size: u64) {
        let g = 1u64 << self.shift;
        let a = offset.div_ceil(g);
        let b = ((offset + size) >> self.shift).min(self.committed.len());
        self.mark_spare(a, b, (a, b));
    }

    /// The region `freed` (offset, size) went back into the free block `merged` (offset, size).
    /// Only the granules it touched can have become spare (widened by one on each side for the
    /// slack TLSF keeps with a region, under its minimum split, far below a granule; and only
    /// those wholly inside `merged`): its free neighbours' granules were spare already. So a
    /// free costs the region's words, not the merged block's (next to a free tail of
    /// gigabytes it scanned all of it). The whole merged hole is queued, as one that just grew:
    /// queuing the region's granules alone would move memory out of older parts of growing
    /// holes, where the step's next tensors land (`docs/decisions/holes-free-queue.md`).
    pub(super) fn freed_region(&mut self, freed: (u64, u64), merged: (u64, u64)) {
        let g = 1u64 << self.shift;
        let ((offset, size), (r_offset, r_size)) = (merged, freed);
        let a = offset
            .div_ceil(g)
            .max((r_offset >> self.shift).saturating_sub(1));
        let b = ((offset + size) >> self.shift)
            .min((r_offset + r_size).div_ceil(g) + 1)
            .min(self.committed.len());
        let whole = (
            offset.div_ceil(g),
            ((offset + size) >> self.shift).min(self.committed.len()),
        );
        self.mark_spare(a, b, whole);
    }

    /// Granules `[a, b)` lie wholly in free space: the committed ones become spare.
    pub(in crate::pool::arena) fn mark_spare(&mut self, a: u64, b: u64, hole: (u64, u64)) {
        if a < b && self.spare.set_where(&self.committed, a, b) > 0 {
            if let Some(u) = self.handles.as_mut() {
                u.respare(a, b, &self.spare);
                return;
            }
            self.queue.push_back(hole);
            if self.queue.len() > 2 * self.spare.ones() as usize + 64 {
                // Mostly stale: rebuild from the bitmap (in address order; the ages are lost),
                // in the queue's own memory (a new one per rebuild was a malloc and a free on
                // the free path).
                self.queue.clear();
                self.queue
                    .extend(self.spare.runs(0, self.spare.len(), true));
            }
        }
    }

    /// Granules `[a, b)` touched by `[offset, offset + size)`.
    /// (The part past the last whole granule is always committed and not tracked.)
    pub(in crate::pool::arena) fn touched(&self, offset: u64, size: u64) -> (u64, u64) {
        let g = 1u64 << self.shift;
        let len = self.committed.len();
        (
            (offset >> self.shift).min(len),
            (offset + size).div_ceil(g).min(len),
        )
    }

    /// Decommitted granules under `region`.
    pub(in crate::pool::arena) fn lacking(&self, region: &Region) -> u64 {
        if self.committed.ones() == self.committed.len() {
            return 0;
        }
        let (a, b) = self.touched(region.offset, region.size);
        if self.committed.all(a, b) {
            return 0;
        }
        (b - a) - self.committed.count(a, b)
    }

    /// `[offset, offset + size)` was allocated: its granules are no longer spare. Returns the
    /// granules `[a, b)` it touches.
    pub(in crate::pool::arena) fn taken(&mut self, offset: u64, size: u64) -> (u64, u64) {
        let (a, b) = self.touched(offset, size);
        if self.spare.clear(a, b) > 0
            && let Some(u) = self.handles.as_mut()
        {
            u.unspare(a, b);
        }
        (a, b)
    }

    /// The first run of decommitted granules in `[from, b)`, as (start, end).
    pub(in crate::pool::arena) fn next_lacking(&self, from: u64, b: u64) -> Option<(u64, u64)> {
        if self.committed.ones() == self.committed.len() {
            return None;
        }
        let start = self.committed.next(from, b, false)?;
        Some((start, self.committed.next(start, b, true).unwrap_or(b)))
    }

    /// Takes up to `n` spare granules below granule `end`, one run: with whole units the
    /// largest spare unit that fits, else from the range that became spare the longest ago;
    /// returns its first granule and length.
    pub(in crate::pool::arena) fn take_spare(&mut self, n: u64, end: u64) -> Option<(u64, u64)> {
        let end = end.min(self.spare.len());
        if let Some(u) = self.handles.as_mut() {
            let (start, len) = u.take(n, end)?;
            self.spare.clear(start, start + len);
            return Some((start, len));
        }
        let mut skipped = Vec::new();
        let mut found = None;
        while let Some((a, b)) = self.queue.pop_front() {
            let b = b.min(self.spare.len());
            let Some(start) = self.spare.next(a, b.min(end), true) else {
                if b > end && a < b {
                    // Spare past `end` only: keep the entry for another caller.
                    skipped.push((a, b));
                }
                continue;
            };
            let stop = self
                .spare
                .next(start, b.min(end), false)
                .unwrap_or(b.min(end))
                .min(start + n);
            if stop < b {
                self.queue.push_front((stop, b));
            }
            found = Some((start, stop - start));
            break;
        }
        for e in skipped.into_iter().rev() {
            self.queue.push_front(e);
        }
        let (start, len) = found?;
        self.spare.clear(start, start + len);
        Some((start, len))
    }

    /// With whole units, the places where a request of `size` bytes at `align` lies wholly on
    /// one spare unit, in the smallest such units first (at most [`SPARE_UNIT_TRIES`]), as byte
    /// offsets; none where granules go alone.
    pub(in crate::pool::arena) fn spare_unit_places(
        &mut self,
        size: u64,
        align: u64,
    ) -> [Option<u64>; SPARE_UNIT_TRIES] {
        let mut places = [None; SPARE_UNIT_TRIES];
        let shift = self.shift;
        let Some(u) = self.handles.as_mut() else {
            return places;
        };
        let mut units = [None; SPARE_UNIT_TRIES];
        u.smallest(size.div_ceil(1 << shift), &mut units);
        for (place, (start, len)) in places.iter_mut().zip(units.into_iter().flatten()) {
            *place = place_on(start, start + len, shift, size, align);
        }
        places
    }

    /// With whole units, the places where a request of `size` bytes at `align` lies wholly on
    /// a run of spare granules, the first such runs in address order (at most
    /// [`SPARE_UNIT_TRIES`]), as byte offsets; none where granules go alone. A run may lie in
    /// a unit a live tensor holds, or span units: committed memory the request needs no call
    /// for.
    pub(in crate::pool::arena) fn spare_run_places(
        &self,
        size: u64,
        align: u64,
    ) -> [Option<u64>; SPARE_UNIT_TRIES] {
        let mut places = [None; SPARE_UNIT_TRIES];
        if self.handles.is_none() {
            return places;
        }
        let shift = self.shift;
        let fits = self
            .spare
            .runs(0, self.spare.len(), true)
            .filter_map(|(a, b)| place_on(a, b, shift, size, align));
        for (place, offset) in places.iter_mut().zip(fits) {
            *place = Some(offset);
        }
        places
    }

    /// With whole units, takes the smallest spare unit to give back; as [`Holes::take_spare`].
    pub(in crate::pool::arena) fn take_smallest_unit(&mut self) -> Option<(u64, u64)> {
        let (start, len) = self.handles.as_mut()?.take_smallest()?;
        self.spare.clear(start, start + len);
        Some((start, len))
    }

    /// `n` granules taken at `from` by [`Holes::take_spare`] stay where they are: spare again.
    pub(in crate::pool::arena) fn untake(&mut self, from: u64, n: u64) {
        self.spare.set(from, from + n);
        if let Some(u) = self.handles.as_mut() {
            u.untake(from, n);
        }
    }

    /// The memory of `n` granules taken at `from` now backs granule `to` on.
    pub(in crate::pool::arena) fn moved(&mut self, from: u64, to: u64, n: u64) {
        self.committed.clear(from, from + n);
        self.committed.set(to, to + n);
        if let Some(u) = self.handles.as_mut() {
            u.moved(from, to);
        }
    }

    /// The memory of `n` granules taken at `from` was given back.
    pub(in crate::pool::arena) fn given_back(&mut self, from: u64, n: u64) {
        self.committed.clear(from, from + n);
        if let Some(u) = self.handles.as_mut() {
            u.removed(from);
        }
    }

    /// Granules `[a, b)` were backed with new memory by one call: one unit.
    pub(in crate::pool::arena) fn backed(&mut self, a: u64, b: u64) {
        self.committed.set(a, b);
        if let Some(u) = self.handles.as_mut() {
            u.add(a, b - a);
        }
    }
}

/// The lowest offset at `align` (a power of two, checked) from which `size` bytes lie within
/// granules `[start, end)` of `2^shift` bytes, if any.
fn place_on(start: u64, end: u64, shift: u32, size: u64, align: u64) -> Option<u64> {
    let offset = ((start << shift) + align - 1) & !(align - 1);
    (offset + size <= end << shift).then_some(offset)
}

#[cfg(test)]
mod tests;
