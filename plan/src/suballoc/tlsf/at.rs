//! Placement at a chosen offset: the carve a caller asks for when it knows where a request went
//! last time (a pool replaying the layout of a repeated step), found from a nearby block by a
//! bounded walk of the physical chain instead of an address index (which every carve and free
//! would pay to keep).

use super::class::class_of;
use super::node::{NONE, SENTINEL, State};
use super::{Carved, Hit, MAX_NODES, Tlsf};
use crate::suballoc::{Landmark, Region, check_request};
use crate::{Error, Result};

impl Tlsf {
    /// Blocks [`Tlsf::allocate_at`] walks from its starting block before it gives up.
    pub const AT_STEPS: usize = 64;

    /// Carves exactly `[offset, offset + size)` if it lies inside one free block. The block is
    /// looked for from `near`, the landmark of a region this allocator issued (live or freed,
    /// so its block may since have merged, moved or been reused for another block), or from
    /// the block at the end of the range for `None` or a landmark whose block is gone, over at
    /// most [`Tlsf::AT_STEPS`] physical neighbours. `Ok(None)` when the range is not free, or not found within the
    /// walk: a stale `near` costs the walk, never a wrong carve.
    ///
    /// # Errors
    /// As [`Tlsf::allocate`]; [`Error::Misaligned`] for an `offset` that is not a multiple of
    /// `align`.
    #[inline]
    pub fn allocate_at(
        &mut self,
        offset: u64,
        size: u64,
        align: u64,
        near: Option<Landmark>,
    ) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        // `align` is a power of two (checked): a mask, not a division.
        if offset & (align - 1) != 0 {
            return Err(Error::Misaligned {
                what: "placement offset",
                value: offset,
                align,
                align_name: "requested alignment",
            });
        }
        Ok(self
            .place_at(offset, size, near.map_or(NONE, |l| l.0 as u32))
            .map(|c| self.region(c, size)))
    }

    /// The placement behind [`Tlsf::allocate_at`], for a validated request, looked for from
    /// node `near`. Out of line and returning a [`Carved`] in registers, as [`Tlsf::place`]
    /// does: the whole `Region` returned through memory stalled the caller on every hint.
    fn place_at(&mut self, offset: u64, size: u64, near: u32) -> Option<Carved> {
        let end = offset.checked_add(size).filter(|e| *e <= self.capacity)?;
        if self.nodes.len() > MAX_NODES - 2 && self.vacant_count < 2 {
            return None;
        }
        let node = self.block_at(offset, near)?;
        let n = self.nodes[node as usize];
        if !n.is_free_in_chain() || n.offset + n.size < end {
            return None;
        }
        let hit = Hit {
            node,
            pad: offset - n.offset,
            class: class_of(n.size),
        };
        Some(self.carve_general(hit, size))
    }

    /// The block holding byte `offset`, walking the physical chain from node `from` (an index
    /// from a landmark: it may be vacant, or any block now), or from the last block when that
    /// is no block (`NONE`, the sentinel or a vacant node: no better start is known).
    fn block_at(&self, offset: u64, from: u32) -> Option<u32> {
        let live = (from as usize) < self.nodes.len()
            && from != SENTINEL
            && self.nodes[from as usize].state() != State::Vacant;
        let mut at = if live { from } else { self.last };
        for _ in 0..Self::AT_STEPS {
            let n = &self.nodes[at as usize];
            at = if offset < n.offset {
                n.prev_phys
            } else if offset - n.offset >= n.size {
                n.next_phys
            } else {
                return Some(at);
            };
            if at == NONE {
                return None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
