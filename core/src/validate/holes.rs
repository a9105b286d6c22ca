//! The front's checks of holes in reserved blocks ([`Growable::extend_block`],
//! [`Growable::decommit_range`], [`Growable::commit_range`], [`Growable::remap_range`]): the
//! backend offers them
//! ([`InPlaceGrowth::holes`](crate::backend::InPlaceGrowth::holes)), the block was reserved,
//! every range is whole granules inside its committed size, and the two ranges of a remap do not
//! overlap. The front does not track which ranges are committed, nor the units a backend with
//! [`InPlaceGrowth::whole_units`](crate::backend::InPlaceGrowth::whole_units) takes only whole
//! (such a backend refuses a range that cuts one): that is the pool's bookkeeping, as which
//! ranges are free is.

use super::{Validated, rules};
use crate::backend::{Backend, BlockId};
use crate::{Error, Result};

#[cfg(doc)]
use crate::backend::Growable;

/// What a range of a hole call is, for errors.
const WHAT: &str = "range of a hole in a reserved block";

impl Validated {
    /// Checks `ranges` (offset, size) of `block` for a hole call named `call`; returns nothing
    /// but the first violation.
    pub(super) fn check_holes(
        &self,
        call: &'static str,
        block: BlockId,
        ranges: &[(u64, u64)],
    ) -> Result<()> {
        self.check_alive()?;
        let growth = rules::growth(self.growth(), self.capabilities())?;
        if !growth.holes {
            return Err(Error::Unsupported {
                backend: self.capabilities().backend,
                what: format!("holes in blocks that grow in place ({call})"),
            });
        }
        let committed = {
            let st = self.lock();
            let size = st.blocks.get(block)?.size;
            if !st.reserved.contains_key(&block) {
                return Err(Error::Unsupported {
                    backend: self.capabilities().backend,
                    what: format!("{call} on block {}, which was not reserved", block.0),
                });
            }
            size
        };
        let g = growth.granularity;
        for &(offset, size) in ranges {
            if size == 0 {
                return Err(Error::ZeroSize { what: WHAT });
            }
            rules::aligned(WHAT, offset, g, "in-place growth granularity")?;
            rules::aligned(WHAT, size, g, "in-place growth granularity")?;
            if offset.checked_add(size).is_none_or(|end| end > committed) {
                return Err(Error::OutOfBounds {
                    what: "committed size of the reserved block",
                    offset,
                    size,
                    limit: committed,
                });
            }
        }
        if let [(a, n), (b, m)] = *ranges
            && a < b + m
            && b < a + n
        {
            return Err(Error::Overlap {
                what: format!("{call}: the two ranges"),
                block: block.0,
                first_offset: a,
                first_size: n,
                second_offset: b,
                second_size: m,
            });
        }
        Ok(())
    }

    /// [`Growable::extend_block`], checked: holes are offered, the block was reserved, and `size`
    /// is whole granules above its committed size, within the reservation.
    pub(super) fn extend_checked(&self, block: BlockId, size: u64) -> Result<()> {
        self.check_holes("extend_block", block, &[])?;
        let growth = rules::growth(self.growth(), self.capabilities())?;
        let (old, reserve) = {
            let st = self.lock();
            let old = st.blocks.get(block)?.size;
            (old, st.reserved.get(&block).copied().unwrap_or(old))
        };
        growth.check_committed(size, reserve, "reservation")?;
        if size <= old {
            return Err(crate::GrowthError::NotAnExtension {
                block: block.0,
                committed: old,
                size,
            }
            .into());
        }
        self.observe(self.inner_growable()?.extend_block(block, size))?;
        let extended = self.lock().blocks.resize(block, size);
        extended.map_err(|e| self.mark_broken(e))
    }

    pub(super) fn decommit_checked(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.check_holes("decommit_range", block, &[(offset, size)])?;
        self.observe(self.inner_growable()?.decommit_range(block, offset, size))
    }

    pub(super) fn commit_checked(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.check_holes("commit_range", block, &[(offset, size)])?;
        self.observe(self.inner_growable()?.commit_range(block, offset, size))
    }

    pub(super) fn remap_checked(
        &self,
        block: BlockId,
        from: u64,
        to: u64,
        size: u64,
    ) -> Result<()> {
        self.check_holes("remap_range", block, &[(from, size), (to, size)])?;
        self.observe(self.inner_growable()?.remap_range(block, from, to, size))
    }
}
