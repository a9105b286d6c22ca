//! The front's [`Growable`]: offered exactly where the backend's is, with reservations capped
//! at the (possibly lowered) block limit, and every call checked before the backend's sees it.
//! Here the checks of [`Growable::reserve_block`] and [`Growable::resize_block`]: sizes in whole
//! granules within the reservation, and the committed size a backend reports after a resize
//! (exact on growth, between the target and the old size on a shrink), since the pools count it.
//! The holes checks, which act on ranges inside a reserved block, are in `holes`.

use super::{Validated, rules};
use crate::backend::{Backend, BlockDesc, BlockId, Growable, InPlaceGrowth, MemoryKind};
use crate::{Error, Result};

impl Growable for Validated {
    fn in_place_growth(&self) -> InPlaceGrowth {
        self.growth().unwrap_or(InPlaceGrowth::NONE)
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.reserve_checked(desc, reserve)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.resize_checked(block, size)
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.decommit_checked(block, offset, size)
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.commit_checked(block, offset, size)
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        self.remap_checked(block, from, to, size)
    }

    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        self.extend_checked(block, size)
    }
}

impl Validated {
    /// The growth the front offers: the backend's, a reservation never beyond the (possibly
    /// lowered) block limit; none when that limit is below one granule.
    pub(super) fn growth(&self) -> Option<InPlaceGrowth> {
        let g = self.backend.growable()?.in_place_growth();
        let max_reserve = g
            .max_reserve
            .min(self.caps.max_block_size / g.granularity * g.granularity);
        (max_reserve > 0).then_some(InPlaceGrowth { max_reserve, ..g })
    }

    /// The backend's capability, behind the front's checks (which found growth offered).
    pub(super) fn inner_growable(&self) -> Result<&dyn Growable> {
        self.backend.growable().ok_or_else(|| Error::Unsupported {
            backend: self.capabilities().backend,
            what: "blocks that grow in place".into(),
        })
    }

    /// [`Growable::reserve_block`], checked: the backend grows in place, the block is not managed,
    /// and the reservation and its first commit are whole granules within `max_reserve`.
    pub(super) fn reserve_checked(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.check_alive()?;
        let growth = rules::growth(self.growth(), self.capabilities())?;
        if desc.kind == MemoryKind::Managed {
            return Err(Error::Unsupported {
                backend: self.capabilities().backend,
                what: "managed blocks that grow in place (reserve_block)".into(),
            });
        }
        if reserve == 0 {
            return Err(Error::ZeroSize {
                what: "reservation",
            });
        }
        growth.check_committed(reserve, growth.max_reserve, "max_reserve")?;
        growth.check_committed(desc.size, reserve, "reservation")?;
        let id = self.observe(self.inner_growable()?.reserve_block(desc, reserve))?;
        let mut st = self.lock();
        let mirrored = st.blocks.insert_as(id, desc.kind, desc.size, ());
        st.reserved.insert(id, reserve);
        drop(st);
        mirrored.map_err(|e| self.mark_broken(e))?;
        Ok(id)
    }

    /// [`Growable::resize_block`], checked: the block was reserved, `size` is whole granules within
    /// the reservation, and the committed size the backend reports is one it may report (else the
    /// device is marked broken).
    pub(super) fn resize_checked(&self, block: BlockId, size: u64) -> Result<u64> {
        self.check_alive()?;
        let growth = rules::growth(self.growth(), self.capabilities())?;
        let reserve = {
            let st = self.lock();
            st.blocks.get(block)?;
            *st.reserved.get(&block).ok_or_else(|| Error::Unsupported {
                backend: self.capabilities().backend,
                what: format!("resizing block {}, which was not reserved", block.0),
            })?
        };
        growth.check_committed(size, reserve, "reservation")?;
        let old = self.lock().blocks.get(block)?.size;
        let now = self.observe(self.inner_growable()?.resize_block(block, size))?;
        // Growth commits exactly `size`; a shrink keeps between `size` and the old size, in
        // whole granules.
        let (lo, hi) = if size >= old {
            (size, size)
        } else {
            (size, old)
        };
        if now < lo || now > hi || !now.is_multiple_of(growth.granularity) {
            return Err(self.mark_broken(Error::invariant(
                "resize_block commits the size asked, in whole granules",
                format!(
                    "{}: resize_block of block {} from {old} to {size} bytes reported {now} \
                     bytes committed (want {lo}..={hi}, a multiple of {})",
                    self.capabilities().backend,
                    block.0,
                    growth.granularity
                ),
            )));
        }
        let resized = self.lock().blocks.resize(block, now);
        resized.map_err(|e| self.mark_broken(e))?;
        Ok(now)
    }
}
