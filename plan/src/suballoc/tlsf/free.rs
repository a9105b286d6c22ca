//! Freeing: validating a region against its node, then immediate coalescing with the free
//! physical neighbours.

use super::Tlsf;
use super::node::{NONE, SENTINEL, State};
#[cfg(doc)]
use crate::Error;
use crate::Result;
use crate::suballoc::{Region, Slot, check_region};

impl Tlsf {
    /// Returns `region` to the free space, merging it with free neighbours. Constant time.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if another allocator issued `region`; [`Error::StaleHandle`],
    /// [`Error::DoubleFree`] or
    /// [`ArgumentError::RegionMismatch`](crate::ArgumentError::RegionMismatch) if its slot no
    /// longer describes it. The allocator is unchanged on error.
    #[inline]
    pub fn free(&mut self, region: Region) -> Result<()> {
        self.free_merged(region).map(|_| ())
    }

    /// [`Tlsf::free`], returning the free block the region became part of, as (offset, size):
    /// the hole an arena may give the memory of back.
    ///
    /// # Errors
    /// As [`Tlsf::free`].
    pub fn free_merged(&mut self, region: Region) -> Result<(u64, u64)> {
        let idx = self.validate(&region)?;
        let n = self.nodes[idx as usize];
        self.allocations -= 1;
        self.free_bytes += n.size;
        let mut merged = idx;
        if n.prev_phys != NONE && self.nodes[n.prev_phys as usize].is_free_in_chain() {
            let prev = n.prev_phys;
            self.unlink(prev);
            self.absorb_next(prev);
            merged = prev;
        }
        let next = self.nodes[merged as usize].next_phys;
        if next != NONE && self.nodes[next as usize].is_free_in_chain() {
            self.unlink(next);
            self.absorb_next(merged);
        }
        self.link(merged);
        let m = &self.nodes[merged as usize];
        Ok((m.offset, m.size))
    }

    /// Checks that `region` is a live allocation of this allocator; returns its node index.
    pub(super) fn validate(&self, region: &Region) -> Result<u32> {
        check_region(region, self.owner, "Tlsf sub-allocator", "slot", |idx| {
            let n = self.nodes.get(idx as usize).filter(|_| idx != SENTINEL)?;
            // A used node keeps its generation where a free one links its free list.
            Some(Slot {
                used: n.state() == State::Used,
                generation: n.prev_free,
                offset: n.offset,
                size: n.size,
            })
        })
    }

    /// Merges the physical successor of `idx` into it and recycles the successor's node. Both
    /// must be out of the free lists; `idx` is then a free block not yet linked.
    #[inline]
    pub(super) fn absorb_next(&mut self, idx: u32) {
        let next = self.nodes[idx as usize].next_phys;
        debug_assert!(next != NONE);
        let gone = self.nodes[next as usize];
        let node = &mut self.nodes[idx as usize];
        node.size += gone.size;
        node.next_phys = gone.next_phys;
        if gone.next_phys != NONE {
            self.nodes[gone.next_phys as usize].prev_phys = idx;
        } else {
            self.last = idx;
        }
        self.release_node(next);
    }
}
