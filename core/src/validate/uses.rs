//! In-flight uses: which byte ranges the device work behind each unfinished ticket touches.
//!
//! Every copy, fill and dispatch that passes the front is recorded here, whoever issued it. A
//! free asks [`InFlight::last_use`] for the latest unfinished ticket that touches its range, so a
//! kernel dispatched on raw ranges is tracked exactly like one dispatched on tensors: the pool
//! defers the free until that ticket completes, so a freed range is not reused while a kernel on
//! it is still queued (the conformance case `kernel_on_freed_tensor_is_tracked`).

use crate::backend::{BlockId, BlockRange, Ticket};

use super::rules::overlaps;

/// Uses of unfinished tickets, in ticket order.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    uses: Vec<(Ticket, BlockRange)>,
    /// Highest ticket known to have completed.
    completed: Ticket,
}

impl InFlight {
    /// Records that work with `ticket` touches `ranges`.
    pub(crate) fn record(&mut self, ticket: Ticket, ranges: &[BlockRange]) {
        if ticket > self.completed {
            self.uses.extend(ranges.iter().map(|r| (ticket, *r)));
        }
    }

    /// Everything up to `ticket` has completed: forget its uses.
    pub(crate) fn completed(&mut self, ticket: Ticket) {
        if ticket > self.completed {
            self.completed = ticket;
            self.uses.retain(|(t, _)| *t > ticket);
        }
    }

    /// Forgets the uses of tickets up to `ticket` and returns their ranges (the transfer lane's
    /// uses, once a joined compute ticket covers them).
    pub(crate) fn take_through(&mut self, ticket: Ticket) -> Vec<BlockRange> {
        let mut taken = Vec::new();
        self.uses.retain(|(t, r)| {
            if *t <= ticket {
                taken.push(*r);
                false
            } else {
                true
            }
        });
        taken
    }

    /// The latest unfinished ticket whose work touches `range` ([`Ticket::DONE`] when none).
    pub(crate) fn last_use(&self, range: &BlockRange) -> Ticket {
        self.uses
            .iter()
            .filter(|(_, r)| overlaps(r, range))
            .map(|(t, _)| *t)
            .max()
            .unwrap_or(Ticket::DONE)
    }

    /// Whether unfinished work touches `block`.
    pub(crate) fn touches(&self, block: BlockId) -> bool {
        self.uses.iter().any(|(_, r)| r.block == block)
    }

    /// Number of recorded uses (the front refreshes completion when it grows large).
    pub(crate) fn len(&self) -> usize {
        self.uses.len()
    }
}
