//! Backing a placed region with memory, and giving spare memory back: moved from spare granules
//! while the pool is past its allowance, else new; each change of the committed bytes counted
//! and told to the listener.

use super::{ArenaState as State, GrowingArena};
use crate::backend::BlockId;
use crate::suballoc::{Landmark, Region};
use crate::{Error, Result};

impl GrowingArena {
    /// Backs the granules `region` touches with memory: moved from spare granules, else new.
    /// `Ok(false)` when the budget or the device refuses new memory (granules backed so far
    /// stay committed; the caller returns the region, which makes them spare).
    pub(in crate::pool::arena) fn back(
        &self,
        st: &mut State,
        index: usize,
        region: &Region,
    ) -> Result<bool> {
        // Where memory moves in whole units, the sites placed on the memory moved here follow
        // it (`Sites::follow`). Per granule that changes how often memory moves, not a peak, so
        // it is off there (`docs/decisions/holes-hints.md`).
        let follow = Self::holes(st, index)
            .is_some_and(|h| h.whole_units())
            .then(|| region.landmark());
        self.back_range(st, index, (region.offset, region.size), region.size, follow)
    }

    /// Backs the granules `[offset, offset + size)` touches, as [`GrowingArena::back`] a region's,
    /// for a request of `request` bytes (the pool's allowance counts it). With `follow` (the
    /// landmark of the region placed there), the sites placed on memory moved there follow it.
    pub(in crate::pool::arena) fn back_range(
        &self,
        st: &mut State,
        index: usize,
        (offset, size): (u64, u64),
        request: u64,
        follow: Option<Landmark>,
    ) -> Result<bool> {
        let Some(h) = Self::holes(st, index) else {
            return Ok(true);
        };
        let (mut pos, end) = h.taken(offset, size);
        let shift = h.shift;
        let id = Self::block_id(st, index)?;
        let allowance = Self::allowance(st, request, shift);
        // Run by run, left to right (what a run is backed with lies outside the region, so the
        // runs after it do not change).
        while let Some((a, b)) = Self::holes(st, index).and_then(|h| h.next_lacking(pos, end)) {
            let mut at = a;
            while at < b {
                // New memory while the pool stays within its allowance, else memory moved.
                let fresh = st.stats.reserved + ((b - at) << shift) <= allowance;
                let Some(h) = Self::holes(st, index) else {
                    break;
                };
                let len = h.committed.len();
                let spare = if fresh {
                    None
                } else {
                    h.take_spare(b - at, len)
                };
                // Whole units past the pool's peak: a spare unit (larger than the run, or it
                // would have been moved) goes back before new memory is made.
                let peak = st.stats.reserved + ((b - at) << shift) > st.stats.peak_reserved;
                if spare.is_none() && !fresh && peak {
                    self.give_back_smallest(st, index, id);
                }
                if let Some((from, n)) = spare {
                    let moved = self
                        .growable()
                        .and_then(|g| g.remap_range(id, from << shift, at << shift, n << shift));
                    if let Err(e) = Self::remember_loss(st, moved) {
                        if let Some(h) = Self::holes(st, index) {
                            h.untake(from, n);
                        }
                        return Err(e);
                    }
                    if let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) {
                        if let Some(h) = b.role.holes.as_mut() {
                            h.moved(from, at, n);
                        }
                        // The requests placed on that memory find it where it went
                        // (`Sites::follow`).
                        if let Some(near) = follow {
                            b.role
                                .hints
                                .moved((from << shift, n << shift), at << shift, near);
                        }
                    }
                    at += n;
                } else {
                    if !self.commit(st, index, id, at << shift, (b - at) << shift)? {
                        return Ok(false);
                    }
                    at = b;
                }
            }
            pos = b;
        }
        Ok(true)
    }

    /// Committed bytes of the block at `index` (0 for none).
    fn committed(st: &State, index: usize) -> u64 {
        st.blocks
            .get(index)
            .and_then(Option::as_ref)
            .map_or(0, |b| b.committed())
    }

    /// Backs `[offset, offset + size)` of the arena with new memory, charged to the budget.
    /// `Ok(false)` when the budget or the device refuses.
    fn commit(
        &self,
        st: &mut State,
        index: usize,
        id: BlockId,
        offset: u64,
        size: u64,
    ) -> Result<bool> {
        if !self.budget.try_reserve(size) {
            return Ok(false);
        }
        if let Err(e) = Self::remember_loss(
            st,
            self.growable()
                .and_then(|g| g.commit_range(id, offset, size)),
        ) {
            self.budget.release(size);
            return match e {
                Error::OutOfMemory(_) => Ok(false),
                e => Err(e),
            };
        }
        let before = Self::committed(st, index);
        if let Some(h) = Self::holes(st, index) {
            let shift = h.shift;
            h.backed(offset >> shift, (offset + size) >> shift);
        }
        self.committed_changed(st, index, before);
        Ok(true)
    }

    /// Decommits up to `at_most` bytes of spare granules below byte `below`, a run at a time;
    /// returns the bytes given back. A run the backend refuses stays committed (and spare).
    pub(in crate::pool::arena) fn release_spare(
        &self,
        st: &mut State,
        index: usize,
        below: u64,
        at_most: u64,
    ) -> Result<u64> {
        let Some(h) = Self::holes(st, index) else {
            return Ok(0);
        };
        let shift = h.shift;
        let (end, mut left) = (below >> shift, at_most >> shift);
        let id = Self::block_id(st, index)?;
        let mut released = 0;
        while left > 0 {
            let Some(h) = Self::holes(st, index) else {
                break;
            };
            let Some((from, n)) = h.take_spare(left, end) else {
                break;
            };
            if let Err(e) = self.give_back_taken(st, index, id, (from, n), shift) {
                return if released > 0 { Ok(released) } else { Err(e) };
            }
            released += n << shift;
            left -= n;
        }
        Ok(released)
    }

    /// With whole units, decommits the smallest spare unit of the arena at `index` (block `id`),
    /// if there is one. A unit the backend refuses stays committed (and spare).
    fn give_back_smallest(&self, st: &mut State, index: usize, id: BlockId) {
        let Some(h) = Self::holes(st, index) else {
            return;
        };
        let shift = h.shift;
        let Some(taken) = h.take_smallest_unit() else {
            return;
        };
        // Refused, the unit stays committed and spare: new memory is made as before.
        let _ = self.give_back_taken(st, index, id, taken, shift);
    }

    /// Decommits `n` granules from granule `from`, taken spare from the arena at `index` (block
    /// `id`), and counts them given back; refused, they are spare again and the error returned.
    fn give_back_taken(
        &self,
        st: &mut State,
        index: usize,
        id: BlockId,
        (from, n): (u64, u64),
        shift: u32,
    ) -> Result<()> {
        let r = self
            .growable()
            .and_then(|g| g.decommit_range(id, from << shift, n << shift));
        if let Err(e) = Self::remember_loss(st, r) {
            if let Some(h) = Self::holes(st, index) {
                h.untake(from, n);
            }
            return Err(e);
        }
        let before = Self::committed(st, index);
        if let Some(h) = Self::holes(st, index) {
            h.given_back(from, n);
        }
        self.budget.release(n << shift);
        self.committed_changed(st, index, before);
        Ok(())
    }

    /// Counts a change of the committed bytes of the block at `index` from `before` and tells
    /// the listener (the old extent goes, the new one comes, as for a resize).
    fn committed_changed(&self, st: &mut State, index: usize, before: u64) {
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return;
        };
        let (id, now) = (b.id, b.committed());
        self.count_reserved(&mut st.stats, before, now);
        self.notify(|l| {
            l.block_released(&self.config.name, id, before);
            l.block_reserved(&self.config.name, id, now);
        });
    }
}
