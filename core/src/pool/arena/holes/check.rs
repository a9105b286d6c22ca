//! Checks of the holes' invariants, for the pool's `check_invariants`.

use super::super::growing::{ARENA, ArenaState, GrowingArena};
use super::Holes;

/// Bytes past a region that may still belong to its TLSF block (slack and later pads, each
/// under the minimum split): a bound, far below a granule.
const SLACK: u64 = 64;

impl GrowingArena {
    /// Every region held in the arena (live or waiting for its ticket) is backed, no spare
    /// granule lies under one, and the free space between them is spare where committed.
    pub(in crate::pool::arena) fn check_holes(
        st: &ArenaState,
        h: &Holes,
        extent: u64,
    ) -> std::result::Result<(), String> {
        let live = st.slots.iter().map(|l| (l.region.offset, l.region.size));
        let waiting = st.deferred.iter().map(|d| (d.1.1.offset, d.1.1.size));
        let mut held: Vec<(u64, u64)> = live.chain(waiting).collect();
        held.sort_unstable();
        let at = |e: String| format!("block {ARENA}: {e}");
        let mut free_from = 0;
        for &(offset, size) in &held {
            h.check_backed(offset, size).map_err(at)?;
            // TLSF keeps under its minimum split of slack behind a region: the gap from a
            // little past it to the next region is free.
            h.check_free(free_from, offset.saturating_sub(free_from))
                .map_err(at)?;
            free_from = free_from.max(offset + size + SLACK);
        }
        h.check_free(free_from, extent.saturating_sub(free_from))
            .map_err(at)?;
        h.check().map_err(at)
    }
}

/// Checks for the pool's invariants.
impl Holes {
    /// `[offset, offset + size)`, a held region, is backed by memory and not spare.
    pub(in crate::pool::arena) fn check_backed(
        &self,
        offset: u64,
        size: u64,
    ) -> std::result::Result<(), String> {
        let (a, b) = self.touched(offset, size);
        if self.committed.count(a, b) != b - a {
            return Err(format!(
                "region at {offset} of {size} bytes lies on decommitted granules"
            ));
        }
        if self.spare.count(a, b) != 0 {
            return Err(format!(
                "region at {offset} of {size} bytes lies on spare granules"
            ));
        }
        Ok(())
    }

    /// Every committed granule wholly inside `[offset, offset + size)`, free space, is spare
    /// (a free that left one out would keep its memory from being moved or given back).
    pub(in crate::pool::arena) fn check_free(
        &self,
        offset: u64,
        size: u64,
    ) -> std::result::Result<(), String> {
        let g = 1u64 << self.shift;
        let a = offset.div_ceil(g);
        let b = ((offset + size) >> self.shift).min(self.committed.len());
        if a < b && self.committed.count(a, b) != self.spare.count(a, b) {
            return Err(format!(
                "free space at {offset} of {size} bytes has committed granules that are not spare"
            ));
        }
        Ok(())
    }

    /// Spare granules are committed, and the units agree with both.
    pub(in crate::pool::arena) fn check(&self) -> std::result::Result<(), String> {
        if let Some(u) = &self.handles {
            u.check(&self.committed, &self.spare)?;
        }
        let spare_uncommitted = (0..self.spare.len())
            .filter(|i| self.spare.get(*i) && !self.committed.get(*i))
            .count();
        if spare_uncommitted > 0 || self.spare.len() != self.committed.len() {
            return Err(format!(
                "{spare_uncommitted} spare granules are not committed"
            ));
        }
        Ok(())
    }
}
