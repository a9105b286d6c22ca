//! The bottom pools' invariants, checked by tests and by the failure-injection suite: every
//! block's carving is sound and spans exactly its extent, a reservation covers its extent, the
//! kind's own invariants hold ([`Kind::check_block`]), and the counters, the budget's charge and
//! the sub-allocated bytes agree with the live allocations and pending frees.

use super::carved::{Carved, Kind, Role, State};

impl<K: Kind> Carved<K> {
    /// Checks the state behind the lock.
    pub(super) fn check_state(&self, st: &State<K>) -> std::result::Result<(), String> {
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
            if b.role.reserved().is_some_and(|r| r < b.size) {
                return Err(format!("block {i}: {:?} below {} bytes", b.role, b.size));
            }
            K::check_block(st, i, b)?;
            reserved += b.committed();
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
