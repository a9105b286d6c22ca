use std::cell::Cell;
use std::rc::Rc;

use super::*;

/// A fake event: a shared "has the GPU passed this point" flag.
type Flag = Rc<Cell<bool>>;

fn flag(done: bool) -> Flag {
    Rc::new(Cell::new(done))
}

fn done(e: &Flag) -> Result<bool> {
    Ok(e.get())
}

#[test]
fn nothing_issued_is_complete() {
    let mut ring: TicketRing<Flag> = TicketRing::new(4);
    assert_eq!(ring.completed(), Ticket::DONE);
    assert_eq!(ring.unrecorded(), None);
    assert_eq!(ring.poll(done).ok(), Some(Ticket::DONE));
    assert!(ring.check_issued(Ticket::DONE).is_ok());
    assert!(matches!(
        ring.check_issued(Ticket(1)),
        Err(Error::UnknownTicket {
            ticket: 1,
            issued: 0
        })
    ));
}

#[test]
fn one_event_covers_every_ticket_issued_before_it() {
    let mut ring = TicketRing::new(4);
    for i in 1..=5 {
        assert_eq!(ring.issue(), Ticket(i));
    }
    assert_eq!(ring.unrecorded(), Some(Ticket(5)));
    let ev = flag(false);
    ring.push_recorded(Ticket(5), ev.clone());
    assert_eq!(ring.unrecorded(), None);
    assert_eq!(ring.in_flight_len(), 1);
    // Every ticket 1..=5 waits on the same event.
    for t in 1..=5 {
        assert_eq!(ring.covering(Ticket(t)).map(|(t, _)| t), Some(Ticket(5)));
    }
    assert_eq!(ring.poll(done).ok(), Some(Ticket::DONE));
    ev.set(true);
    assert_eq!(ring.poll(done).ok(), Some(Ticket(5)));
    assert_eq!(ring.in_flight_len(), 0);
    assert_eq!(ring.spare_len(), 1, "the completed event is kept for reuse");
    ring.check_invariants();
}

#[test]
fn poll_stops_at_the_first_incomplete_event() {
    let mut ring = TicketRing::new(8);
    let evs: Vec<Flag> = (0..3).map(|_| flag(false)).collect();
    for e in &evs {
        ring.issue();
        ring.issue();
        let t = ring.last_issued();
        ring.push_recorded(t, e.clone());
    }
    evs[0].set(true);
    // A later flag set before an earlier one is ignored until the earlier completes: events
    // complete in stream order, so poll never skips one.
    evs[2].set(true);
    assert_eq!(ring.poll(done).ok(), Some(Ticket(2)));
    evs[1].set(true);
    assert_eq!(ring.poll(done).ok(), Some(Ticket(6)));
    ring.check_invariants();
}

#[test]
fn waiting_for_a_ticket_waits_for_its_covering_event() {
    let mut ring = TicketRing::new(8);
    ring.issue();
    ring.push_recorded(Ticket(1), flag(false));
    ring.issue();
    ring.issue();
    ring.push_recorded(Ticket(3), flag(false));
    ring.issue(); // 4 is unrecorded
    // Ticket 2 is covered by the event recorded at 3; waiting on it completes 1..=3.
    let covering = ring.covering(Ticket(2)).map(|(t, _)| t);
    assert_eq!(covering, Some(Ticket(3)));
    ring.retire_through(Ticket(3));
    assert_eq!(ring.completed(), Ticket(3));
    assert_eq!(ring.in_flight_len(), 0);
    assert_eq!(ring.unrecorded(), Some(Ticket(4)));
    assert!(ring.covering(Ticket(4)).is_none(), "4 needs a record first");
    ring.check_invariants();
}

#[test]
fn completed_only_advances_to_retired_events() {
    let mut ring = TicketRing::new(8);
    ring.issue();
    ring.push_recorded(Ticket(1), flag(true));
    ring.issue();
    // Ticket 2 has no event: retiring "through 2" only completes what was recorded.
    ring.retire_through(Ticket(2));
    assert_eq!(ring.completed(), Ticket(1));
    ring.check_invariants();
}

#[test]
fn spare_list_is_bounded_and_reused() {
    let mut ring = TicketRing::new(2);
    let mut created = 0;
    for _ in 0..10 {
        let t = ring.issue();
        let ev = ring.take_spare().unwrap_or_else(|| {
            created += 1;
            flag(false)
        });
        ev.set(true);
        ring.push_recorded(t, ev);
        assert!(ring.poll(done).is_ok());
        assert!(ring.spare_len() <= 2);
    }
    assert_eq!(created, 1, "steady state reuses one event");
    assert_eq!(ring.completed(), Ticket(10));
    ring.check_invariants();
}

#[test]
fn errors_from_the_query_propagate() {
    let mut ring = TicketRing::new(2);
    let t = ring.issue();
    ring.push_recorded(t, flag(false));
    let lost = |_: &Flag| -> Result<bool> {
        Err(Error::DeviceLost {
            backend: "cuda",
            detail: "test".into(),
        })
    };
    assert!(matches!(ring.poll(lost), Err(Error::DeviceLost { .. })));
    assert_eq!(ring.completed(), Ticket::DONE);
}

/// Model check: random interleavings of issue / record / GPU progress / poll keep the
/// invariants; `completed` never passes the fake GPU's true progress, and a final wait completes
/// every issued ticket.
#[test]
fn random_schedules_match_a_model() {
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let mut ring: TicketRing<u64> = TicketRing::new(3);
        let mut gpu = 0u64; // highest ticket the fake GPU has executed
        for _ in 0..100 {
            match next() % 5 {
                0 | 1 => {
                    ring.issue();
                }
                2 => {
                    if let Some(t) = ring.unrecorded() {
                        ring.push_recorded(t, t.0);
                    }
                }
                3 => {
                    let issued = ring.last_issued().0;
                    if issued > gpu {
                        gpu += 1 + next() % (issued - gpu);
                    }
                }
                _ => {
                    let c = ring.poll(|t| Ok(gpu >= *t)).unwrap_or(Ticket::DONE);
                    assert!(c.0 <= gpu, "completed {} passed the GPU at {gpu}", c.0);
                }
            }
            ring.check_invariants();
        }
        if let Some(t) = ring.unrecorded() {
            ring.push_recorded(t, t.0);
        }
        let last = ring.last_issued();
        if let Some((t, _)) = ring.covering(last) {
            ring.retire_through(t);
        }
        assert_eq!(ring.completed(), last);
    }
}
