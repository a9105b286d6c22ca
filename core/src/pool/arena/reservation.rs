//! Blocks that grow in place, for the bottom pools that reserve them (the growing arena and
//! the expandable allocations): the reservation of address space with its first bytes
//! committed, the record of a resize the backend made, and a budget charge that asks the
//! runtime's pools for room once.

use std::sync::MutexGuard;

use super::carved::{Carved, Kind, Role, State};
use crate::backend::{BlockDesc, BlockId, Growable};
use crate::{Error, Result};

impl<K: Kind> Carved<K> {
    /// The backend's blocks that grow in place: offered wherever a pool reserves them (its
    /// growth comes from it), refused as unsupported elsewhere.
    pub(super) fn growable(&self) -> Result<&dyn Growable> {
        self.backend.growable().ok_or_else(|| Error::Unsupported {
            backend: self.backend.capabilities().backend,
            what: "blocks that grow in place".into(),
        })
    }

    /// Reserves `reserve` bytes of address space as one block with its first `bytes` committed,
    /// already charged to the budget: `Ok(None)`, the charge returned, when address space or
    /// memory is short (the caller then does without the reservation).
    pub(super) fn reserve_charged(
        &self,
        st: &mut State<K>,
        bytes: u64,
        reserve: u64,
        label: &str,
    ) -> Result<Option<BlockId>> {
        let desc = BlockDesc {
            kind: self.config.kind,
            size: bytes,
            label,
        };
        let reserved = self
            .growable()
            .and_then(|g| g.reserve_block(&desc, reserve));
        match Self::remember_loss(st, reserved) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                self.budget.release(bytes);
                match e {
                    Error::OutOfMemory(_) | Error::Unsupported { .. } => Ok(None),
                    e => Err(e),
                }
            }
        }
    }

    /// Records that the block at `index` now commits `new` bytes instead of `old` (the backend
    /// has done it; the budget is charged for growth, and released here for shrinking).
    pub(super) fn resized(
        &self,
        st: &mut State<K>,
        index: usize,
        old: u64,
        new: u64,
    ) -> Result<()> {
        let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Err(Error::invariant("a resized block is live", "none"));
        };
        let before = b.committed();
        if new > old {
            b.carving.grow(new - old)?;
        } else {
            b.carving.shrink(old - new)?;
        }
        b.role.resized(new);
        b.size = new;
        let (id, after) = (b.id, b.committed());
        if after < before {
            // Holes past the new end were given back already: only what was committed goes.
            self.budget.release(before - after);
        }
        self.count_reserved(&mut st.stats, before, after);
        // Listeners know blocks, not resizes: the old extent goes and the new one comes, so a
        // reserved-bytes total kept from the events stays exact.
        self.notify(|l| {
            l.block_released(&self.config.name, id, before);
            l.block_reserved(&self.config.name, id, after);
        });
        Ok(())
    }

    /// Charges `bytes` to the budget, asking the runtime's pools to release idle blocks once
    /// when it refuses (the pool's lock is released meanwhile). Whether it was charged.
    pub(super) fn charge<'a>(
        &'a self,
        st: MutexGuard<'a, State<K>>,
        bytes: u64,
    ) -> Result<(MutexGuard<'a, State<K>>, bool)> {
        if self.budget.try_reserve(bytes) {
            return Ok((st, true));
        }
        drop(st);
        let released = self.budget.relieve(None)?;
        let st = self.lock();
        Ok((st, released > 0 && self.budget.try_reserve(bytes)))
    }
}
