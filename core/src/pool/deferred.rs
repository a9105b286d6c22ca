//! Frees that wait for a ticket: the one stream-ordered reuse rule, shared by every pool.
//!
//! Memory freed while work that uses it is still in flight must not be handed out again until that
//! work completes. Each pool pushes such frees here with the ticket to wait for, and reclaims the
//! ones whose ticket the backend reports complete before every allocation attempt.

use std::collections::VecDeque;

use crate::backend::Ticket;

/// A queue of items, each released once its ticket completes.
pub(crate) struct Deferred<T> {
    /// Ordered by push; tickets are usually but not necessarily increasing, so reclaim scans.
    items: VecDeque<(Ticket, u64, T)>,
    /// Sum of the sizes of the queued items, in bytes.
    bytes: u64,
}

impl<T> Deferred<T> {
    pub(crate) fn new() -> Self {
        Deferred {
            items: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Queues `item` of `size` bytes until `ticket` completes.
    pub(crate) fn push(&mut self, ticket: Ticket, size: u64, item: T) {
        self.bytes += size;
        self.items.push_back((ticket, size, item));
    }

    /// Removes and returns every item whose ticket is at or below `completed`.
    pub(crate) fn reclaim(&mut self, completed: Ticket) -> Vec<T> {
        if self.items.is_empty() {
            return Vec::new();
        }
        let mut done = Vec::new();
        let mut keep = VecDeque::with_capacity(self.items.len());
        for (ticket, size, item) in self.items.drain(..) {
            if ticket <= completed {
                self.bytes -= size;
                done.push(item);
            } else {
                keep.push_back((ticket, size, item));
            }
        }
        self.items = keep;
        done
    }

    /// The queued items with their sizes in bytes, in push order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.items.iter().map(|(_, size, item)| (*size, item))
    }

    /// Bytes waiting for a ticket.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_wait_for_their_ticket() {
        let mut d = Deferred::new();
        d.push(Ticket(3), 10, "a");
        d.push(Ticket(1), 20, "b");
        d.push(Ticket(5), 30, "c");
        assert_eq!(d.bytes(), 60);
        assert_eq!(d.reclaim(Ticket(0)), Vec::<&str>::new());
        assert_eq!(d.reclaim(Ticket(3)), vec!["a", "b"]);
        assert_eq!(d.bytes(), 30);
        assert_eq!(d.reclaim(Ticket(9)), vec!["c"]);
        assert_eq!(d.bytes(), 0);
    }
}
