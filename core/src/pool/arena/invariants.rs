//! The arena pool's invariants, checked by tests and by the failure-injection suite: every
//! block's TLSF is sound and spans exactly its committed bytes, only the arena has a reservation
//! and no class, and the counters, the budget's charge and the sub-allocated bytes agree with the
//! live allocations and pending frees; the arena's holes never lie under a held region.

use super::{ArenaPool, Role, State};

/// Bytes past a region that may still belong to its TLSF block (slack and later pads, each
/// under the minimum split): a bound, far below a granule.
const SLACK: u64 = 64;

impl ArenaPool {
    /// Checks the state behind the lock.
    pub(super) fn check_state(&self, st: &State) -> std::result::Result<(), String> {
        let mut reserved = 0;
        for (i, b) in st.blocks.iter().enumerate() {
            let Some(b) = b else { continue };
            b.carving.check_invariants()?;
            if b.carving.capacity() != b.size {
                return Err(format!(
                    "block {i}: {} bytes, TLSF over {}",
                    b.size,
                    b.carving.capacity()
                ));
            }
            // A reservation covers the committed size; exactly the arena is the arena.
            if b.reserved().is_some_and(|r| r < b.size) {
                return Err(format!("block {i}: {:?} below {} bytes", b.role, b.size));
            }
            if (st.arena == Some(i)) != matches!(b.role, Role::Arena { .. }) {
                return Err(format!("block {i}: {:?}, arena {:?}", b.role, st.arena));
            }
            // An expandable allocation's block holds it alone, whole.
            if Self::is_expandable(st, i) {
                let mut held = st.slots.iter().filter(|l| l.block == i);
                let whole = held.next().is_some_and(|l| l.region.size == b.size);
                let waiting = st.deferred.iter().any(|d| d.1.0 == i);
                if !(whole && held.next().is_none() || waiting) {
                    return Err(format!("block {i}: an expandable block not held whole"));
                }
            }
            if b.holes.is_some() && st.arena != Some(i) {
                return Err(format!("block {i}: holes outside the arena"));
            }
            if let Some(h) = &b.holes {
                // Every region held (live or waiting for its ticket) is backed, and no spare
                // granule lies under one.
                let held = st
                    .slots
                    .iter()
                    .filter(|l| l.block == i)
                    .map(|l| (l.region.offset, l.region.size))
                    .chain(
                        st.deferred
                            .iter()
                            .filter(|d| d.1.0 == i)
                            .map(|d| (d.1.1.offset, d.1.1.size)),
                    );
                let mut held: Vec<(u64, u64)> = held.collect();
                held.sort_unstable();
                let mut free_from = 0;
                for &(offset, size) in &held {
                    h.check_backed(offset, size)
                        .map_err(|e| format!("block {i}: {e}"))?;
                    // TLSF keeps under its minimum split of slack behind a region: the gap
                    // from a little past it to the next region is free.
                    h.check_free(free_from, offset.saturating_sub(free_from))
                        .map_err(|e| format!("block {i}: {e}"))?;
                    free_from = free_from.max(offset + size + SLACK);
                }
                h.check_free(free_from, b.size.saturating_sub(free_from))
                    .map_err(|e| format!("block {i}: {e}"))?;
                h.check().map_err(|e| format!("block {i}: {e}"))?;
            }
            reserved += b.committed();
        }
        if st
            .arena
            .is_some_and(|i| st.blocks.get(i).is_none_or(Option::is_none))
        {
            return Err(format!("arena {:?} names no block", st.arena));
        }
        if reserved != st.stats.reserved {
            return Err(format!(
                "reserved {} != blocks {reserved}",
                st.stats.reserved
            ));
        }
        let charged = self.budget.reserved();
        if (self.shared_budget && charged < reserved)
            || (!self.shared_budget && charged != reserved)
        {
            return Err(format!("budget holds {charged} for {reserved} reserved"));
        }
        if st.stats.blocks != st.blocks.iter().flatten().count() {
            return Err("block count out of sync".into());
        }
        let live: u64 = st.slots.iter().map(|l| l.region.size).sum();
        if live != st.stats.in_use {
            return Err(format!("in_use {} != live {live}", st.stats.in_use));
        }
        // TLSF may hand out a little slack with a region (never more than its minimum split), so
        // sub-allocated bytes bound the held ones from above, and are zero exactly when nothing is.
        let used: u64 = st
            .blocks
            .iter()
            .flatten()
            .map(|b| b.carving.report().used)
            .sum();
        let held = live + st.deferred.bytes();
        if used < held || (held == 0) != (used == 0) {
            return Err(format!(
                "sub-allocated {used} inconsistent with live {live} + pending {}",
                st.deferred.bytes()
            ));
        }
        if st.slots.len() != st.stats.allocations {
            return Err("allocation count out of sync".into());
        }
        Ok(())
    }
}
