//! Growing and shrinking the managed range at its end: the sub-allocator of an arena whose block
//! grows in place (`Growable::resize_block`). Kept apart from the allocation path, which never
//! changes the capacity.
//!
//! Both are O(1): the end of the physical chain is tracked (`Tlsf::last`), so growth extends the
//! free tail or appends a free block after a used one, and shrinking cuts the free tail. A live
//! region widens in place into the free block after it (`Tlsf::extend_region`, O(1)): how an
//! expandable allocation takes the bytes its block grew by.

use super::class::class_of;
use super::{Hit, MAX_NODES, NONE, Tlsf, fit};
use crate::suballoc::{Region, check_request};
use crate::{Error, Result};

impl Tlsf {
    /// Free bytes at the end of the range: the size of the last block when it is free, else 0.
    /// Growing by `need - free_tail()` bytes (plus alignment padding) makes room for `need`.
    pub fn free_tail(&self) -> u64 {
        let last = &self.nodes[self.last as usize];
        if last.is_free_in_chain() {
            last.size
        } else {
            0
        }
    }

    /// Extends the range by `additional` bytes at its end: they join the free tail (or become a
    /// free block after a used last block). Existing regions are unchanged. Constant time.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for 0, [`Error::TooLarge`] if the capacity would overflow `u64`. The
    /// allocator is unchanged on error.
    pub fn grow(&mut self, additional: u64) -> Result<()> {
        if additional == 0 {
            return Err(Error::ZeroSize { what: "growth" });
        }
        let capacity = self
            .capacity
            .checked_add(additional)
            .ok_or(Error::TooLarge {
                what: "growth",
                requested: additional,
                limit: u64::MAX - self.capacity,
                limit_name: "u64 range",
            })?;
        let last = self.last;
        if self.nodes[last as usize].is_free_in_chain() {
            self.unlink(last);
            self.nodes[last as usize].size += additional;
            self.link(last);
        } else {
            let r = self.new_node(self.capacity, additional, last, NONE, NONE, NONE);
            self.nodes[last as usize].next_phys = r;
            self.last = r;
            self.link(r);
        }
        self.capacity = capacity;
        self.free_bytes += additional;
        Ok(())
    }

    /// Cuts `amount` bytes off the end of the range. They must be free ([`Tlsf::free_tail`]) and
    /// the range must keep at least one byte. Constant time.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for 0; [`Error::TooLarge`] when the free tail is shorter than `amount`
    /// or `amount` is the whole range. The allocator is unchanged on error.
    pub fn shrink(&mut self, amount: u64) -> Result<()> {
        if amount == 0 {
            return Err(Error::ZeroSize { what: "shrink" });
        }
        let tail = self.free_tail();
        if amount > tail || amount >= self.capacity {
            return Err(Error::TooLarge {
                what: "shrink",
                requested: amount,
                limit: tail.min(self.capacity.saturating_sub(1)),
                limit_name: "the range's free tail (and less than the whole range)",
            });
        }
        let last = self.last;
        self.unlink(last);
        if amount == tail {
            let prev = self.nodes[last as usize].prev_phys;
            debug_assert!(prev != NONE, "a range of one free block is never cut whole");
            self.nodes[prev as usize].next_phys = NONE;
            self.last = prev;
            self.release_node(last);
        } else {
            self.nodes[last as usize].size -= amount;
            self.link(last);
        }
        self.capacity -= amount;
        self.free_bytes -= amount;
        Ok(())
    }
}

impl Tlsf {
    /// Carves `size` bytes at a multiple of `align` from the free tail, if it fits there: the
    /// allocation that follows a [`Tlsf::grow`] made for it. (The general search may pass over
    /// the tail when it shares the request's own class without heading its list.) Constant time.
    ///
    /// # Errors
    /// As [`Tlsf::allocate`].
    pub fn allocate_at_end(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        if self.nodes.len() > MAX_NODES - 2 && self.vacant_count < 2 {
            return Ok(None);
        }
        let last = self.last;
        let n = self.nodes[last as usize];
        if !n.is_free_in_chain() {
            return Ok(None);
        }
        let Some(pad) = fit(n.offset, n.size, size, align) else {
            return Ok(None);
        };
        let hit = Hit {
            node: last,
            pad,
            class: class_of(n.size),
        };
        let carved = self.carve_general(hit, size);
        Ok(Some(self.region(carved, size)))
    }

    /// Widens a live region by `additional` bytes into the free block right after it, in
    /// place: a reallocation that moves nothing. `Ok(false)`, with nothing changed, when the
    /// bytes past its end are not free. Constant time.
    ///
    /// # Errors
    /// As [`Tlsf::free`] for a region this allocator does not hold live;
    /// [`Error::TooLarge`] when the size would overflow `u64`. Nothing changes on error.
    pub fn extend_region(&mut self, region: &mut Region, additional: u64) -> Result<bool> {
        let idx = self.validate(region)?;
        let size = region.size.checked_add(additional).ok_or(Error::TooLarge {
            what: "region growth",
            requested: additional,
            limit: u64::MAX - region.size,
            limit_name: "u64 range",
        })?;
        let n = self.nodes[idx as usize];
        // The block's slack may already hold the growth.
        let need = size.saturating_sub(n.size);
        if need > 0 {
            let next = n.next_phys;
            if next == NONE {
                return Ok(false);
            }
            let free = self.nodes[next as usize];
            if !free.is_free_in_chain() || free.size < need {
                return Ok(false);
            }
            self.unlink(next);
            if free.size - need < self.min_split {
                // A remainder too small to split stays with the region as slack.
                self.free_bytes -= free.size;
                self.absorb_next(idx);
            } else {
                self.free_bytes -= need;
                let f = &mut self.nodes[next as usize];
                f.offset += need;
                f.size -= need;
                self.nodes[idx as usize].size += need;
                self.link(next);
            }
        }
        region.size = size;
        Ok(true)
    }
}
