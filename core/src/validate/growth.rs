//! The front's checks of blocks that grow in place ([`Backend::reserve_block`],
//! [`Backend::resize_block`]): sizes in whole granules within the reservation, and the committed
//! size a backend reports after a resize (exact on growth, between the target and the old size on
//! a shrink), since the pools count it. Separate from the holes checks, which act on ranges inside
//! a reserved block.

use super::{Validated, rules};
use crate::backend::{Backend, BlockDesc, BlockId, MemoryKind};
use crate::{Error, Result};

impl Validated {
    /// [`Backend::reserve_block`], checked: the backend grows in place, the block is not managed,
    /// and the reservation and its first commit are whole granules within `max_reserve`.
    pub(super) fn reserve_checked(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.check_alive()?;
        let growth = rules::growth(self)?;
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
        rules::committed_size(growth, reserve, growth.max_reserve, "max_reserve")?;
        rules::committed_size(growth, desc.size, reserve, "reservation")?;
        let id = self.observe(self.backend.reserve_block(desc, reserve))?;
        let mut st = self.lock();
        let mirrored = st.blocks.insert_as(id, desc.kind, desc.size, ());
        st.reserved.insert(id, reserve);
        drop(st);
        mirrored.map_err(|e| self.mark_broken(e))?;
        Ok(id)
    }

    /// [`Backend::resize_block`], checked: the block was reserved, `size` is whole granules within
    /// the reservation, and the committed size the backend reports is one it may report (else the
    /// device is marked broken).
    pub(super) fn resize_checked(&self, block: BlockId, size: u64) -> Result<u64> {
        self.check_alive()?;
        let growth = rules::growth(self)?;
        let reserve = {
            let st = self.lock();
            st.blocks.get(block)?;
            *st.reserved.get(&block).ok_or_else(|| Error::Unsupported {
                backend: self.capabilities().backend,
                what: format!("resizing block {}, which was not reserved", block.0),
            })?
        };
        rules::committed_size(growth, size, reserve, "reservation")?;
        let old = self.lock().blocks.get(block)?.size;
        let now = self.observe(self.backend.resize_block(block, size))?;
        // Growth commits exactly `size`; a shrink keeps between `size` and the old size, in
        // whole granules.
        let (lo, hi) = if size >= old {
            (size, size)
        } else {
            (size, old)
        };
        if now < lo || now > hi || !now.is_multiple_of(growth.granularity) {
            return Err(self.mark_broken(Error::invalid(format!(
                "{}: resize_block of block {} from {old} to {size} bytes reported {now} bytes \
                 committed (want {lo}..={hi}, a multiple of {})",
                self.capabilities().backend,
                block.0,
                growth.granularity
            ))));
        }
        let resized = self.lock().blocks.resize(block, now);
        resized.map_err(|e| self.mark_broken(e))?;
        Ok(now)
    }
}
