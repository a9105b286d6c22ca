//! Checks of the holes' invariants, for the pool's `check_invariants`.

use super::Holes;

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
