//! Frees that wait for a ticket: the one stream-ordered reuse rule, shared by every pool.
//!
//! Memory freed while work that uses it is still in flight must not be handed out again until that
//! work completes. Each pool pushes such frees here with the ticket to wait for, and reclaims the
//! ones whose ticket the backend reports complete before every allocation attempt.

use std::collections::BTreeMap;

use crate::backend::Ticket;

/// A queue of items, each released once its ticket completes.
pub(crate) struct Deferred<T> {
    /// Keyed by (ticket, push number): a reclaim takes the completed prefix in O(k log n) for k
    /// items released, and O(log n) when none is. (A list scanned on every reclaim made each
    /// allocation O(n) in the pending frees, quadratic when a slow queue let thousands pile up:
    /// zero-on-reuse on the host backend spent most of its CPU time there.)
    items: BTreeMap<(Ticket, u64), (u64, T)>,
    pushed: u64,
    /// Sum of the sizes of the queued items, in bytes.
    bytes: u64,
}

impl<T> Deferred<T> {
    pub(crate) fn new() -> Self {
        Deferred {
            items: BTreeMap::new(),
            pushed: 0,
            bytes: 0,
        }
    }

    /// Queues `item` of `size` bytes until `ticket` completes.
    pub(crate) fn push(&mut self, ticket: Ticket, size: u64, item: T) {
        self.bytes += size;
        self.items.insert((ticket, self.pushed), (size, item));
        self.pushed += 1;
    }

    /// Removes and returns every item whose ticket is at or below `completed`, in ticket order.
    pub(crate) fn reclaim(&mut self, completed: Ticket) -> Vec<T> {
        let due = |(t, _): &(Ticket, u64)| *t <= completed;
        if !self.items.first_key_value().is_some_and(|(k, _)| due(k)) {
            return Vec::new();
        }
        let pending = match completed.0.checked_add(1) {
            Some(next) => self.items.split_off(&(Ticket(next), 0)),
            None => BTreeMap::new(),
        };
        let done = std::mem::replace(&mut self.items, pending);
        done.into_values()
            .map(|(size, item)| {
                self.bytes -= size;
                item
            })
            .collect()
    }

    /// The queued items with their sizes in bytes, in ticket order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.items.values().map(|(size, item)| (*size, item))
    }

    /// Bytes waiting for a ticket.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The earliest ticket whose completion releases at least `bytes` bytes (`None` when all
    /// that is queued is less). O(k) for the k items it passes.
    pub(crate) fn covering(&self, bytes: u64) -> Option<Ticket> {
        let mut sum = 0u64;
        for (&(ticket, _), &(size, _)) in &self.items {
            sum += size;
            if sum >= bytes {
                return Some(ticket);
            }
        }
        None
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
        assert_eq!(d.covering(20), Some(Ticket(1)));
        assert_eq!(d.covering(21), Some(Ticket(3)));
        assert_eq!(d.covering(60), Some(Ticket(5)));
        assert_eq!(d.covering(61), None);
        assert_eq!(d.reclaim(Ticket(0)), Vec::<&str>::new());
        assert_eq!(d.reclaim(Ticket(3)), vec!["b", "a"]);
        assert_eq!(d.bytes(), 30);
        assert_eq!(d.reclaim(Ticket(9)), vec!["c"]);
        assert_eq!(d.bytes(), 0);
        // Equal tickets keep their push order; the largest ticket is reclaimable too.
        d.push(Ticket(u64::MAX), 1, "x");
        d.push(Ticket(2), 1, "y");
        d.push(Ticket(2), 1, "z");
        assert_eq!(d.reclaim(Ticket(2)), vec!["y", "z"]);
        assert_eq!(d.reclaim(Ticket(u64::MAX)), vec!["x"]);
        assert_eq!(d.iter().count(), 0);
    }
}
