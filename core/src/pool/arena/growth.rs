//! The arena's growth policy: how big a new block is, and how a refused block is retried.
//!
//! A request that fits no existing block reserves a new block of [`ArenaConfig::block_size`] bytes
//! (default [`DEFAULT_BLOCK_SIZE`], clamped to the device's largest block). A request larger than
//! that gets a dedicated block of exactly its (aligned) size. When the budget has less room than a
//! regular block, the block shrinks to the request. Blocks go back to the backend only by trim
//! (or the pressure path), so a steady workload stops calling the driver.
//!
//! Kept apart from the carving so that a different block policy (size classes, growth factors)
//! replaces this file only.

use super::{ArenaPool, Block, State, round_up};
use crate::Error;
use crate::Result;
use crate::backend::{BlockDesc, BlockId};
use crate::suballoc::{Region, Tlsf};

#[cfg(doc)]
use super::ArenaConfig;

/// Default block size of an arena pool: 32 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 32 << 20;

/// Size of a new block for a request of `need` bytes: a regular block of `regular` bytes if `room`
/// allows, else just the request; rounded up to `align` (a power of two). `None` when even the
/// request does not fit in `room`.
pub(crate) fn block_size(need: u64, regular: u64, room: u64, align: u64) -> Option<u64> {
    let want = round_up(need.max(regular), align)?;
    if want <= room {
        return Some(want);
    }
    round_up(need, align).filter(|n| *n <= room)
}

impl ArenaPool {
    /// Reserves a new block for a request of `size` bytes and carves it, trimming this pool first
    /// when the budget or the driver refuses. `Ok(None)` means out of memory. On every error path
    /// the budget and the block list are as they were.
    pub(super) fn grow(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<(usize, Region)>> {
        for attempt in 0..2 {
            let bytes = block_size(
                size,
                self.config.block_size,
                self.budget.room(),
                self.copy_align,
            );
            if let Some(bytes) = bytes.filter(|b| self.budget.try_reserve(*b)) {
                if let Some(found) = self.reserve(st, bytes, size, align, label)? {
                    return Ok(Some(found));
                }
            }
            // Refused by the budget or the driver: give back our own empty blocks, once.
            if attempt == 1 || self.trim_locked(st)? == 0 {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Allocates a block of `bytes` (already charged to the budget) and carves the request in it.
    /// `Ok(None)` when the driver is out of memory; the charge is returned on every failure.
    fn reserve(
        &self,
        st: &mut State,
        bytes: u64,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<(usize, Region)>> {
        let desc = BlockDesc {
            kind: self.config.kind,
            size: bytes,
            label: &format!("tensormem {} block for {label}", self.config.name),
        };
        let id = match Self::note(st, self.backend.alloc_block(&desc)) {
            Ok(id) => id,
            Err(e) => {
                self.budget.release(bytes);
                return match e {
                    Error::OutOfMemory(_) => Ok(None),
                    e => Err(e),
                };
            }
        };
        self.install_block(st, id, bytes, None, size, align)
            .map(Some)
    }

    /// Carves a request of `size` at `align` in the fresh backend block `id` of `bytes` (already
    /// charged to the budget), puts the block in a free slot and counts it. On failure the charge
    /// and the block are given back.
    pub(super) fn install_block(
        &self,
        st: &mut State,
        id: BlockId,
        bytes: u64,
        reserved: Option<u64>,
        size: u64,
        align: u64,
    ) -> Result<(usize, Region)> {
        let carved = Tlsf::new(bytes).and_then(|mut tlsf| {
            let region = tlsf.allocate(size, align)?.ok_or_else(|| {
                Error::invalid("internal: a fresh block does not fit its request")
            })?;
            Ok((tlsf, region))
        });
        let (tlsf, region) = match carved {
            Ok(c) => c,
            Err(e) => {
                self.budget.release(bytes);
                let _ = self.backend.free_block(id);
                return Err(e);
            }
        };
        let idx = match st.blocks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                st.blocks.push(None);
                st.blocks.len() - 1
            }
        };
        st.blocks[idx] = Some(Block {
            id,
            size: bytes,
            tlsf,
            reserved,
            idle_since: None,
        });
        self.tell(|l| l.block_reserved(&self.config.name, id, bytes));
        let s = &mut st.stats;
        s.reserved += bytes;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        s.blocks += 1;
        s.blocks_allocated += 1;
        Ok((idx, region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_blocks_shrink_to_the_room_then_refuse() {
        assert_eq!(block_size(100, 4096, u64::MAX, 4), Some(4096));
        assert_eq!(block_size(5000, 4096, u64::MAX, 4), Some(5000));
        assert_eq!(block_size(5001, 4096, u64::MAX, 4), Some(5004));
        assert_eq!(block_size(100, 4096, 1000, 4), Some(100));
        assert_eq!(block_size(1001, 4096, 1000, 4), None);
        assert_eq!(
            block_size(u64::MAX, 1, u64::MAX, 4),
            None,
            "rounding overflows"
        );
    }
}
