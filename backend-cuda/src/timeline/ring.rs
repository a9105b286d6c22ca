//! Ticket bookkeeping over a ring of recorded events, generic over the event type so the rules
//! are tested without a GPU (`ring/tests.rs` uses plain flags as events).
//!
//! Tickets are issued per submission (every `copy`, `fill_zero`, `dispatch`, `write_queued`), but
//! an event is recorded only when someone asks (`flush`, `completed`, `wait`): one
//! `cuEventRecord` then covers every ticket issued since the previous record, because a stream
//! executes in order. The ring therefore holds few events however many submissions there are.
//!
//! ```text
//!   completed        in_flight (oldest .. newest)            recorded      issued
//!      |   [(t=12, ev) (t=15, ev) (t=21, ev)]                    21        24
//!  tickets <= completed are done; 22..=24 are not yet covered by an event
//! ```

#![forbid(unsafe_code)]

use std::collections::VecDeque;

use tensormem_contract::{Error, Result, Ticket};

/// Issued, recorded and completed tickets plus the events that separate them.
#[derive(Debug)]
pub(crate) struct TicketRing<E> {
    /// Last ticket handed out. Invariant: `completed <= recorded <= issued`.
    issued: u64,
    /// Highest ticket covered by a recorded event (the newest entry of `in_flight`, or
    /// `completed` when `in_flight` is empty).
    recorded: u64,
    /// Highest ticket known complete.
    completed: u64,
    /// Recorded events not yet known complete, tickets strictly increasing, all `> completed`.
    in_flight: VecDeque<(u64, E)>,
    /// Completed events kept for reuse (at most `spare_cap`), so steady state creates none.
    spare: Vec<E>,
    /// Most events kept in `spare`; surplus events are dropped (destroyed).
    spare_cap: usize,
}

impl<E> TicketRing<E> {
    /// An empty ring: nothing issued, `Ticket::DONE` complete.
    pub(crate) fn new(spare_cap: usize) -> Self {
        TicketRing {
            issued: 0,
            recorded: 0,
            completed: 0,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
            spare_cap,
        }
    }

    /// Hands out the next ticket for a submission that was just enqueued.
    pub(crate) fn issue(&mut self) -> Ticket {
        self.issued += 1;
        Ticket(self.issued)
    }

    /// The last ticket handed out (`Ticket::DONE` before any).
    pub(crate) fn last_issued(&self) -> Ticket {
        Ticket(self.issued)
    }

    /// The highest ticket known complete. Does not query anything.
    pub(crate) fn completed(&self) -> Ticket {
        Ticket(self.completed)
    }

    /// The ticket an event recorded now would cover, when some issued ticket has no event yet.
    pub(crate) fn unrecorded(&self) -> Option<Ticket> {
        (self.issued > self.recorded).then_some(Ticket(self.issued))
    }

    /// A completed event to record again, if one is kept.
    pub(crate) fn take_spare(&mut self) -> Option<E> {
        self.spare.pop()
    }

    /// Number of events kept for reuse.
    #[cfg(test)]
    pub(crate) fn spare_len(&self) -> usize {
        self.spare.len()
    }

    /// Number of recorded events not yet known complete.
    #[cfg(test)]
    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Registers `event`, just recorded on the stream after every submission up to `ticket`.
    pub(crate) fn push_recorded(&mut self, ticket: Ticket, event: E) {
        debug_assert!(
            ticket.0 > self.recorded && ticket.0 <= self.issued,
            "ticket ring: recorded {} out of order (recorded {}, issued {})",
            ticket.0,
            self.recorded,
            self.issued
        );
        self.recorded = ticket.0;
        self.in_flight.push_back((ticket.0, event));
    }

    /// Rejects a ticket this ring never issued.
    ///
    /// # Errors
    /// [`Error::UnknownTicket`] for a ticket above the last one issued.
    pub(crate) fn check_issued(&self, ticket: Ticket) -> Result<()> {
        if ticket.0 > self.issued {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: self.issued,
            });
        }
        Ok(())
    }

    /// The oldest in-flight event whose ticket is `>= ticket`: waiting for it waits for `ticket`.
    pub(crate) fn covering(&self, ticket: Ticket) -> Option<(Ticket, &E)> {
        self.in_flight
            .iter()
            .find(|(t, _)| *t >= ticket.0)
            .map(|(t, e)| (Ticket(*t), e))
    }

    /// Retires every in-flight event recorded at a ticket `<= ticket` (call it with the ticket of
    /// an event whose wait returned), completing the tickets they cover, and moves the events to
    /// the spare list. `completed` only ever advances to the ticket of a retired event.
    pub(crate) fn retire_through(&mut self, ticket: Ticket) {
        while let Some((t, _)) = self.in_flight.front() {
            if *t > ticket.0 {
                break;
            }
            if let Some((t, e)) = self.in_flight.pop_front() {
                self.completed = self.completed.max(t);
                self.keep_spare(e);
            }
        }
        self.check_invariants();
    }

    /// Queries in-flight events oldest first with `is_done`, retiring each complete one, and
    /// returns the highest completed ticket. Stops at the first incomplete event: events complete
    /// in stream order.
    ///
    /// # Errors
    /// The first error `is_done` returns (a lost device).
    pub(crate) fn poll(&mut self, mut is_done: impl FnMut(&E) -> Result<bool>) -> Result<Ticket> {
        while let Some((t, e)) = self.in_flight.front() {
            if !is_done(e)? {
                break;
            }
            let t = *t;
            self.retire_through(Ticket(t));
        }
        Ok(Ticket(self.completed))
    }

    fn keep_spare(&mut self, event: E) {
        if self.spare.len() < self.spare_cap {
            self.spare.push(event);
        }
    }

    /// Checks the documented invariants (debug builds and tests).
    pub(crate) fn check_invariants(&self) {
        debug_assert!(self.completed <= self.recorded && self.recorded <= self.issued);
        debug_assert!(self.spare.len() <= self.spare_cap);
        debug_assert!(
            self.in_flight
                .iter()
                .zip(self.in_flight.iter().skip(1))
                .all(|(a, b)| a.0 < b.0)
        );
        debug_assert!(self.in_flight.iter().all(|(t, _)| *t > self.completed));
        debug_assert!(
            self.in_flight
                .back()
                .is_none_or(|(t, _)| *t == self.recorded)
        );
    }
}

#[cfg(test)]
mod tests;
