//! The pinned ring behind `write_queued`: the backend owns the bytes of every queued upload.
//!
//! `cuMemcpyHtoDAsync` from the caller's pageable buffer is not a true async copy: the driver
//! either synchronises the stream first or reads the buffer later, and the contract lets the
//! caller reuse `data` as soon as `write_queued` returns. So the bytes are copied into one pinned,
//! write-combined buffer carved as a ring (what PyTorch's `CachingHostAllocator` and wgpu's
//! staging belt do), and the DMA reads from there. Each region stays reserved until the ticket of
//! its copy completes; when the ring is full the call returns `Ok(None)` and the pools stage
//! through an `Upload` block instead, so a burst never blocks.
//!
//! [`RingAlloc`] is the pure bookkeeping (tested in `staging/tests.rs` without a GPU).

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::Mutex;

use tensormem_contract::{Result, Ticket};

use crate::timeline::lock;

/// A region handed out by [`RingAlloc::reserve`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Names the region for [`RingAlloc::finish`].
    pub id: u64,
    /// Byte offset in the ring.
    pub offset: u64,
}

/// One live region starting at `start` (it ends where the next one starts, or at `head`), busy until `ticket` completes (`None` while its copy is
/// being enqueued).
#[derive(Debug)]
struct Region {
    id: u64,
    start: u64,
    ticket: Option<Ticket>,
}

/// Offsets in a ring of `capacity` bytes, regions freed oldest first by ticket.
#[derive(Debug)]
pub(crate) struct RingAlloc {
    capacity: u64,
    /// Live regions, oldest first (allocation order = ring order).
    live: VecDeque<Region>,
    /// Where the next region starts.
    head: u64,
    next_id: u64,
}

impl RingAlloc {
    /// An empty ring of `capacity` bytes.
    pub(crate) fn new(capacity: u64) -> Self {
        RingAlloc {
            capacity,
            live: VecDeque::new(),
            head: 0,
            next_id: 0,
        }
    }

    /// Frees the oldest regions whose copy finished (`ticket <= completed`).
    fn retire(&mut self, completed: Ticket) {
        while self
            .live
            .front()
            .is_some_and(|r| r.ticket.is_some_and(|t| t <= completed))
        {
            self.live.pop_front();
        }
        if self.live.is_empty() {
            self.head = 0;
        }
    }

    /// Reserves `len` contiguous bytes after retiring regions up to `completed`; `None` when they
    /// do not fit now (the caller falls back to another path). `len` must be non-zero.
    pub(crate) fn reserve(&mut self, len: u64, completed: Ticket) -> Option<Reservation> {
        self.retire(completed);
        if len == 0 || len > self.capacity {
            return None;
        }
        let offset = match self.live.front().map(|r| r.start) {
            None => 0,
            // Live bytes are [tail, head): room after head, else from 0 up to the tail.
            Some(tail) if tail < self.head => {
                if self.head + len <= self.capacity {
                    self.head
                } else if len <= tail {
                    0
                } else {
                    return None;
                }
            }
            // Wrapped, or exactly full: live bytes are [tail, capacity) and [0, head).
            Some(tail) => {
                if self.head + len <= tail {
                    self.head
                } else {
                    return None;
                }
            }
        };
        self.next_id += 1;
        self.live.push_back(Region {
            id: self.next_id,
            start: offset,
            ticket: None,
        });
        self.head = offset + len;
        Some(Reservation {
            id: self.next_id,
            offset,
        })
    }

    /// Ends a reservation: busy until `ticket` completes, or free at once (`None`: the copy was
    /// never enqueued).
    pub(crate) fn finish(&mut self, id: u64, ticket: Option<Ticket>) {
        if let Some(r) = self.live.iter_mut().find(|r| r.id == id) {
            r.ticket = Some(ticket.unwrap_or(Ticket::DONE));
        }
    }
}

/// Reserves `len` bytes of `ring`, first against `known` (the tickets known complete, which costs
/// no driver call), then, when that leaves no room, against what `poll` reports complete now.
/// The ring's lock is not held while `poll` runs.
///
/// # Errors
/// Whatever `poll` returns (a lost device).
pub(crate) fn reserve_or_poll(
    ring: &Mutex<RingAlloc>,
    len: u64,
    known: Ticket,
    poll: impl FnOnce() -> Result<Ticket>,
) -> Result<Option<Reservation>> {
    let first = lock(ring).reserve(len, known);
    match first {
        Some(r) => Ok(Some(r)),
        None => {
            let completed = poll()?;
            Ok(lock(ring).reserve(len, completed))
        }
    }
}

#[cfg(test)]
mod tests;
