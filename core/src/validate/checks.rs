//! The checks shared by calls on both lanes (copies, fills), by both mapped accesses, and by every
//! wait (a ticket must have been issued), kept apart from the [`Backend`] impl that calls them.

use super::{Validated, rules};
use crate::backend::{Backend, BlockId, BlockRange, Ticket};
use crate::{Error, Result};

impl Validated {
    /// The checks of a copy on either lane.
    pub(super) fn check_copy(&self, src: BlockRange, dst: BlockRange) -> Result<()> {
        self.check_alive()?;
        if src.size != dst.size {
            return Err(Error::SizeMismatch {
                what: "copy source and destination".into(),
                expected: src.size,
                actual: dst.size,
            });
        }
        {
            let st = self.lock();
            let caps = self.capabilities();
            let both_ways = caps.host_visible_copies;
            let from = rules::transfer_range(&st.blocks, caps, src, "copy source")?;
            rules::copy_end(from, &src, "copy source", both_ways)?;
            let to = rules::transfer_range(&st.blocks, caps, dst, "copy destination")?;
            rules::copy_end(to, &dst, "copy destination", both_ways)?;
        }
        rules::disjoint(&src, &dst, || "copy source and destination".into())
    }

    /// The checks of a fill on either lane.
    pub(super) fn check_fill(&self, range: BlockRange) -> Result<()> {
        self.check_alive()?;
        let st = self.lock();
        let entry = rules::transfer_range(&st.blocks, self.capabilities(), range, "fill")?;
        rules::kind_for(entry, &range, "fill target")
    }

    /// The checks of a mapped write or read (`what`) of `len` bytes at `offset` of `block`.
    pub(super) fn check_mapped(
        &self,
        block: BlockId,
        offset: u64,
        len: usize,
        what: &'static str,
    ) -> Result<()> {
        self.check_alive()?;
        let r = BlockRange {
            block,
            offset,
            size: len as u64,
        };
        let st = self.lock();
        let entry = rules::transfer_range(&st.blocks, self.capabilities(), r, what)?;
        rules::host_visible(entry, self.capabilities(), r)
    }

    /// `Ok` when the device is alive and `ticket` was issued (waiting for a ticket never issued
    /// would never end).
    ///
    /// # Errors
    /// [`Error::DeviceLost`], [`Error::UnknownTicket`].
    pub(super) fn check_issued(&self, ticket: Ticket) -> Result<()> {
        self.check_alive()?;
        if ticket > self.lock().issued {
            // Work may have been issued on the backend before the front was put in front of it.
            let issued = self.flush()?;
            if ticket > issued {
                return Err(Error::UnknownTicket {
                    ticket: ticket.0,
                    issued: issued.0,
                });
            }
        }
        Ok(())
    }
}
