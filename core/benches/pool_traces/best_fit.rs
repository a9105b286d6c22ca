//! The reference placement for the in-place column: exact best fit over one range that grows
//! at its end by the same rule as our arena that grows in place.
//!
//! Best fit (the smallest free range that holds the request, the lowest address among equals)
//! is what TLSF's good fit approximates in O(1). Replayed over the same growing range, it shows
//! how much of our peak is lost to TLSF's classes and how much to online placement itself: a
//! trace whose best-fit peak is well above its live peak cannot be brought down by a better fit,
//! only by knowing lifetimes (the record-and-replay pool's plans). It is a model, not a peer: it
//! keeps two ordered maps per range, so it is not timed.

use std::collections::{BTreeMap, BTreeSet};

use crate::peers::{ALIGN, granularity};

/// A growth commits at least the committed size divided by this: the in-place arena's step
/// (`GROWTH_STEP_DIVISOR` of `core/src/pool/arena/in_place.rs`).
const GROWTH_STEP_DIVISOR: u64 = 32;

/// One growing range placed by exact best fit.
#[derive(Default)]
pub struct BestFit {
    /// Free ranges by (size, offset): the first at or above `(size, 0)` is the best fit.
    by_size: BTreeSet<(u64, u64)>,
    /// Free ranges by offset, for coalescing and the free tail.
    by_offset: BTreeMap<u64, u64>,
    /// Live allocations by trace id: (offset, size).
    live: Vec<Option<(u64, u64)>>,
    committed: u64,
    peak: u64,
    growths: u64,
}

impl BestFit {
    fn insert(&mut self, offset: u64, size: u64) {
        self.by_size.insert((size, offset));
        self.by_offset.insert(offset, size);
    }

    fn remove(&mut self, offset: u64, size: u64) {
        self.by_size.remove(&(size, offset));
        self.by_offset.remove(&offset);
    }

    /// Places allocation `id` of `size` bytes.
    pub fn alloc(&mut self, id: u32, size: u64) {
        let size = size.div_ceil(ALIGN) * ALIGN;
        let offset = match self.by_size.range((size, 0)..).next().copied() {
            Some((free, offset)) => {
                self.remove(offset, free);
                if free > size {
                    self.insert(offset + size, free - size);
                }
                offset
            }
            None => self.grow_for(size),
        };
        let id = id as usize;
        if self.live.len() <= id {
            self.live.resize(id + 1, None);
        }
        self.live[id] = Some((offset, size));
    }

    /// Commits what the free tail lacks for `size` bytes (at least the growth step, in whole
    /// granules) and places the request at the tail's start.
    fn grow_for(&mut self, size: u64) -> u64 {
        let tail = match self.by_offset.last_key_value() {
            Some((&offset, &free)) if offset + free == self.committed => free,
            _ => 0,
        };
        let start = self.committed - tail;
        if tail > 0 {
            self.remove(start, tail);
        }
        let step = (size - tail).max(self.committed / GROWTH_STEP_DIVISOR);
        self.committed += step.div_ceil(granularity()) * granularity();
        self.peak = self.peak.max(self.committed);
        self.growths += 1;
        let rest = self.committed - (start + size);
        if rest > 0 {
            self.insert(start + size, rest);
        }
        start
    }

    /// Frees allocation `id`, merging it with free neighbours.
    ///
    /// # Errors
    /// A free of an id that is not live.
    pub fn free(&mut self, id: u32) -> Result<(), String> {
        let (mut offset, mut size) = self
            .live
            .get_mut(id as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("best fit: free of {id}, which is not live"))?;
        if let Some((&before, &free)) = self.by_offset.range(..offset).next_back()
            && before + free == offset
        {
            self.remove(before, free);
            offset = before;
            size += free;
        }
        if let Some(&free) = self.by_offset.get(&(offset + size)) {
            self.remove(offset + size, free);
            size += free;
        }
        self.insert(offset, size);
        Ok(())
    }

    /// Most bytes committed at once.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Growths (driver calls that map memory).
    pub fn growths(&self) -> u64 {
        self.growths
    }
}
