//! Ring sub-allocator for staging memory: regions are handed out in FIFO order, tagged with the
//! ticket of the submission that used them, and reclaimed in ring order once that ticket completes.
//!
//! Staging uploads and readbacks are short-lived and complete in submission order, so a ring needs
//! no free lists: the live regions always form one contiguous (possibly wrapped) span from `tail`
//! to `head`. This is the ring of VMA's linear pools and of wgpu's staging belt. A request that
//! does not fit before the end of the range wraps to offset 0; the skipped bytes count as used by
//! that region until it is reclaimed.

use std::collections::VecDeque;

use super::{Region, SubAllocReport, align_up, check_capacity, check_request, next_owner_id};
use crate::{Error, Result};

#[cfg(test)]
mod tests;

/// One live region of the ring, in allocation order.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Start of the region.
    offset: u64,
    /// Length of the region in bytes.
    size: u64,
    /// Bytes the region took from the ring: its size plus the alignment padding in front of it,
    /// plus the bytes skipped at the end of the range if it wrapped.
    consumed: u64,
    /// Ticket given by `retire`; `None` while the region is still being filled or used.
    ticket: Option<u64>,
}

/// Ring allocator over `[0, capacity)`.
///
/// ```text
///  not wrapped:  [ free | tail ..live.. head | free ]
///  wrapped:      [ ..live.. head | free | tail ..live.. ]
/// ```
///
/// Invariants: the entries, in order, tile the span that starts at `tail` and ends at `head`
/// (each starting where the previous one ended, plus its padding or wrap); `used` is the sum of
/// their `consumed`; with no entry, `head == tail == 0`.
#[derive(Debug)]
pub struct RingAllocator {
    /// Bytes managed.
    capacity: u64,
    /// Where the next region's span starts (end of the newest region).
    head: u64,
    /// Where the oldest live region's span starts (end of the last reclaimed region).
    tail: u64,
    /// Bytes taken by live regions, padding and wrap skips included.
    used: u64,
    /// Live regions, oldest first.
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`; entry `i` has sequence `front_seq + i`.
    front_seq: u64,
    /// Id stamped into every region.
    owner: u32,
}

impl RingAllocator {
    /// A ring over `[0, capacity)`.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` is 0.
    pub fn new(capacity: u64) -> Result<Self> {
        check_capacity(capacity, "sub-allocator range")?;
        Ok(RingAllocator {
            capacity,
            head: 0,
            tail: 0,
            used: 0,
            entries: VecDeque::new(),
            front_seq: 0,
            owner: next_owner_id(),
        })
    }

    /// Size of the managed range in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// True when no region is live (allocated and not yet reclaimed).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Carves `size` bytes at a multiple of `align` after the newest region, wrapping to offset 0
    /// when the end of the range is too short. Constant time (amortised for the entry queue).
    ///
    /// Returns `Ok(None)` when the free part of the ring cannot hold the request now; reclaiming
    /// completed regions makes room.
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::InvalidAlignment`] or [`Error::TooLarge`], as for every
    /// sub-allocator.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        let after_head = align_up(self.head, align)
            .filter(|&o| o <= self.tail_limit() && self.tail_limit() - o >= size);
        let (offset, consumed) = match after_head {
            Some(o) => (o, o + size - self.head),
            // Not wrapped yet: skip the rest of the range and start again at 0, below the tail.
            None if self.tail < self.head && size <= self.tail => {
                (0, self.capacity - self.head + size)
            }
            None => return Ok(None),
        };
        self.head = offset + size;
        self.used += consumed;
        let seq = self.front_seq + self.entries.len() as u64;
        self.entries.push_back(Entry {
            offset,
            size,
            consumed,
            ticket: None,
        });
        Ok(Some(Region {
            offset,
            size,
            owner: self.owner,
            key: seq,
        }))
    }

    /// End of the free bytes that follow `head`: the range end when not wrapped, else the tail.
    fn tail_limit(&self) -> u64 {
        if self.entries.is_empty() || self.tail < self.head {
            self.capacity
        } else {
            self.tail
        }
    }

    /// Marks `region` as done once `ticket` completes. Constant time.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if another allocator issued `region` or it is not live here. The
    /// ring is unchanged on error.
    pub fn retire(&mut self, region: Region, ticket: u64) -> Result<()> {
        let foreign = || Error::ForeignHandle {
            what: "ring region",
            slot: region.key as u32,
            owner: "RingAllocator",
        };
        if region.owner != self.owner || region.key < self.front_seq {
            return Err(foreign());
        }
        let Some(entry) = usize::try_from(region.key - self.front_seq)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
        else {
            return Err(foreign());
        };
        if entry.offset != region.offset || entry.size != region.size || entry.ticket.is_some() {
            return Err(foreign());
        }
        entry.ticket = Some(ticket);
        Ok(())
    }

    /// Frees, oldest first, every retired region whose ticket is `<= completed`, stopping at the
    /// first region that is not retired or waits for a later ticket. Returns the bytes returned to
    /// the ring (sizes plus padding and wrap skips). Time proportional to the regions reclaimed.
    pub fn reclaim(&mut self, completed: u64) -> u64 {
        let mut bytes = 0;
        while let Some(front) = self.entries.front() {
            match front.ticket {
                Some(t) if t <= completed => {}
                _ => break,
            }
            self.tail = front.offset + front.size;
            bytes += front.consumed;
            self.used -= front.consumed;
            self.entries.pop_front();
            self.front_seq += 1;
        }
        if self.entries.is_empty() {
            self.head = 0;
            self.tail = 0;
        }
        bytes
    }

    /// `used` counts live regions with their padding and wrap skips; `largest_free` is the longest
    /// run that an `align = 1` request could get now.
    pub fn report(&self) -> SubAllocReport {
        let largest = if self.entries.is_empty() {
            self.capacity
        } else if self.tail < self.head {
            (self.capacity - self.head).max(self.tail)
        } else {
            self.tail - self.head
        };
        SubAllocReport::new(self.capacity, self.used, largest, self.entries.len())
    }

    /// Verifies that the entries tile the span from `tail` to `head` and that `used` matches.
    ///
    /// # Errors
    /// A description of the violated invariant.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        if self.entries.is_empty() {
            if self.head != 0 || self.tail != 0 || self.used != 0 {
                return Err(format!(
                    "empty ring with head {} tail {} used {}",
                    self.head, self.tail, self.used
                ));
            }
            return Ok(());
        }
        let (mut pos, mut sum, mut wrapped) = (self.tail, 0u64, false);
        for (i, e) in self.entries.iter().enumerate() {
            let end = e.offset.checked_add(e.size).ok_or("region end overflows")?;
            if e.size == 0 || end > self.capacity {
                return Err(format!("entry {i}: [{}, {end}) out of range", e.offset));
            }
            if e.offset >= pos && e.consumed == end - pos {
                // In place after the previous region (plus padding).
            } else if !wrapped && e.offset == 0 && e.consumed == self.capacity - pos + e.size {
                wrapped = true;
            } else {
                return Err(format!(
                    "entry {i}: offset {} consumed {} does not follow position {pos}",
                    e.offset, e.consumed
                ));
            }
            if wrapped && end > self.tail {
                return Err(format!("entry {i}: wrapped region overruns the tail"));
            }
            pos = end;
            sum += e.consumed;
        }
        if pos != self.head || sum != self.used || self.used > self.capacity {
            return Err(format!(
                "entries end at {pos} (head {}), consume {sum} (used {}, capacity {})",
                self.head, self.used, self.capacity
            ));
        }
        Ok(())
    }
}
