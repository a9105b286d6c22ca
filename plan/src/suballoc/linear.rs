//! Linear (bump) sub-allocator: per-step scratch memory released all at once.
//!
//! Allocation moves a single top pointer up; nothing is freed individually. `reset` starts a new
//! epoch, after which every region of earlier epochs is void. This is the cheapest allocator there
//! is (a compare and an add) and packs perfectly apart from alignment padding, which is why scratch
//! for one step of a workload (temporaries whose lifetime ends with the step) uses it instead of
//! TLSF. It mirrors VMA's linear pools used as a stack.

use super::{Region, SubAllocReport, align_up, check_capacity, check_request, next_owner_id};
use crate::Result;

#[cfg(test)]
mod tests;

/// Bump allocator over `[0, capacity)`.
///
/// Invariant: `used <= top <= capacity`; `top == 0` and `used == 0` when no region was handed out
/// since the last reset.
#[derive(Debug)]
pub struct LinearAllocator {
    /// Bytes managed.
    capacity: u64,
    /// First byte not yet handed out.
    top: u64,
    /// Bytes handed out in regions since the last reset (`top - used` is alignment padding).
    used: u64,
    /// Regions handed out since the last reset.
    allocations: usize,
    /// Number of resets so far; stamped into regions.
    epoch: u64,
    /// Id stamped into every region.
    owner: u32,
}

impl LinearAllocator {
    /// A bump allocator over `[0, capacity)`.
    ///
    /// # Errors
    /// [`Error::ZeroSize`](crate::Error::ZeroSize) if `capacity` is 0.
    pub fn new(capacity: u64) -> Result<Self> {
        check_capacity(capacity, "sub-allocator range")?;
        Ok(LinearAllocator {
            capacity,
            top: 0,
            used: 0,
            allocations: 0,
            epoch: 0,
            owner: next_owner_id(),
        })
    }

    /// Size of the managed range in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// True when nothing was handed out since the last reset.
    pub fn is_empty(&self) -> bool {
        self.allocations == 0
    }

    /// Bytes from 0 up to the end of the last region (the high-water mark of this epoch).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Carves `size` bytes at the first multiple of `align` at or above the top. Constant time.
    ///
    /// Returns `Ok(None)` when the rest of the range is too small; [`reset`](Self::reset) makes
    /// room.
    ///
    /// # Errors
    /// [`Error::ZeroSize`](crate::Error::ZeroSize), [`Error::InvalidAlignment`](crate::Error::InvalidAlignment)
    /// or [`Error::TooLarge`](crate::Error::TooLarge), as for every sub-allocator.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        let Some(offset) = align_up(self.top, align) else {
            return Ok(None);
        };
        if offset > self.capacity || self.capacity - offset < size {
            return Ok(None);
        }
        self.top = offset + size;
        self.used += size;
        self.allocations += 1;
        Ok(Some(Region {
            offset,
            size,
            owner: self.owner,
            key: self.epoch,
        }))
    }

    /// Releases every region at once and starts a new epoch. Constant time.
    ///
    /// Regions of earlier epochs remain as values but describe memory that may be handed out again;
    /// the caller must stop using them (pools guarantee this by resetting only after the step's
    /// tickets complete).
    pub fn reset(&mut self) {
        self.top = 0;
        self.used = 0;
        self.allocations = 0;
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Whether `region` was handed out by this allocator in the current epoch.
    pub fn is_current(&self, region: &Region) -> bool {
        region.owner == self.owner && region.key == self.epoch && region.end() <= self.top
    }

    /// `used` counts the bytes of live regions; alignment padding below the top is neither used nor
    /// allocatable, so it shows as fragmentation (`largest_free = capacity - top < free`).
    pub fn report(&self) -> SubAllocReport {
        SubAllocReport::new(
            self.capacity,
            self.used,
            self.capacity - self.top,
            self.allocations,
        )
    }

    /// Verifies `used <= top <= capacity` and that an empty epoch has nothing below the top.
    ///
    /// # Errors
    /// A description of the violated invariant.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        if self.used > self.top || self.top > self.capacity {
            return Err(format!(
                "used {} <= top {} <= capacity {} violated",
                self.used, self.top, self.capacity
            ));
        }
        if (self.allocations == 0) != (self.top == 0) || (self.allocations == 0) != (self.used == 0)
        {
            return Err(format!(
                "{} allocations with top {} and used {}",
                self.allocations, self.top, self.used
            ));
        }
        Ok(())
    }
}
