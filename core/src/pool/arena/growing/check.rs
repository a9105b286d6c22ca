//! The growing arena's own invariants, for the pool's `check_invariants`: the holes agree
//! with the regions held in the arena.

use super::super::holes::Holes;
use super::{ARENA, ArenaState, GrowingArena};

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
