use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::*;

const NONE_DONE: Ticket = Ticket::DONE;

#[test]
fn regions_stay_reserved_until_their_ticket_completes() {
    let mut ring = RingAlloc::new(100);
    let a = ring.reserve(60, NONE_DONE).unwrap();
    ring.finish(a.id, Some(Ticket(1)));
    // 40 bytes left: 50 does not fit while ticket 1 runs; the bytes are not overwritten.
    assert_eq!(ring.reserve(50, NONE_DONE), None);
    let b = ring.reserve(40, NONE_DONE).unwrap();
    assert_eq!(b.offset, 60);
    ring.finish(b.id, Some(Ticket(2)));
    assert_eq!(ring.reserve(1, NONE_DONE), None, "full");
    // Ticket 1 completes: its region is reused from the start (wrap), up to ticket 2's bytes.
    let c = ring.reserve(50, Ticket(1)).unwrap();
    assert_eq!(c.offset, 0);
    assert_eq!(ring.reserve(11, Ticket(1)), None);
    assert_eq!(ring.reserve(10, Ticket(1)).unwrap().offset, 50);
}

#[test]
fn an_unfinished_reservation_is_never_retired() {
    let mut ring = RingAlloc::new(64);
    let a = ring.reserve(64, NONE_DONE).unwrap();
    // The copy is still being enqueued (no ticket yet): even "everything completed" keeps it.
    assert_eq!(ring.reserve(1, Ticket(u64::MAX)), None);
    ring.finish(a.id, Some(Ticket(5)));
    assert_eq!(ring.reserve(1, Ticket(4)), None);
    assert_eq!(ring.reserve(64, Ticket(5)).unwrap().offset, 0);
}

#[test]
fn a_cancelled_reservation_is_free_at_once() {
    let mut ring = RingAlloc::new(32);
    let a = ring.reserve(32, NONE_DONE).unwrap();
    ring.finish(a.id, None);
    assert_eq!(ring.reserve(32, NONE_DONE).unwrap().offset, 0);
}

#[test]
fn oversized_and_empty_requests_are_refused() {
    let mut ring = RingAlloc::new(16);
    assert_eq!(ring.reserve(17, NONE_DONE), None);
    assert_eq!(ring.reserve(0, NONE_DONE), None);
    assert_eq!(ring.reserve(16, NONE_DONE).unwrap().offset, 0);
}

#[test]
fn wrapped_regions_never_overlap_live_ones() {
    // A deterministic stream of sizes and completions; every live region must stay disjoint.
    let mut ring = RingAlloc::new(1000);
    let mut live: Vec<(u64, u64, u64)> = Vec::new(); // (start, end, ticket)
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut issued = 0u64;
    let mut completed = 0u64;
    for _ in 0..5000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if seed.is_multiple_of(3) && completed < issued {
            completed += 1 + seed % (issued - completed);
        }
        let len = 1 + seed % 300;
        live.retain(|r| r.2 > completed);
        if let Some(res) = ring.reserve(len, Ticket(completed)) {
            let (s, e) = (res.offset, res.offset + len);
            assert!(e <= 1000, "region past the end: {s}..{e}");
            for r in &live {
                assert!(
                    e <= r.0 || s >= r.1,
                    "{s}..{e} overlaps live {}..{}",
                    r.0,
                    r.1
                );
            }
            issued += 1;
            ring.finish(res.id, Some(Ticket(issued)));
            live.push((s, e, issued));
        }
    }
    assert!(
        issued > 1000,
        "the ring should serve most requests, served {issued}"
    );
}

#[test]
fn a_full_ring_polls_the_driver_once_and_without_holding_the_ring() {
    let ring = Arc::new(Mutex::new(RingAlloc::new(64)));
    let a = lock(&ring).reserve(64, NONE_DONE).unwrap();
    lock(&ring).finish(a.id, Some(Ticket(3)));
    // Room against what is known: no poll.
    let b = reserve_or_poll(&ring, 64, Ticket(3), || panic!("no poll needed"))
        .unwrap()
        .unwrap();
    assert_eq!(b.offset, 0);
    lock(&ring).finish(b.id, Some(Ticket(4)));
    // Full against what is known; the poll (which takes the ring's lock, as the driver path
    // must be able to) reports ticket 4 complete and frees the ring. Run with a deadline: a
    // guard held across the poll would deadlock.
    let (tx, rx) = mpsc::channel();
    {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            let r = reserve_or_poll(&ring, 64, Ticket(3), || {
                drop(lock(&ring));
                Ok(Ticket(4))
            });
            tx.send(r.map(|o| o.map(|r| r.offset))).unwrap();
        });
    }
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reserve_or_poll deadlocked");
    assert_eq!(got.unwrap(), Some(0));
    // A failed poll (a lost device) is the caller's error.
    let lost = reserve_or_poll(&ring, 64, Ticket::DONE, || {
        Err(tensormem_contract::Error::invalid("x"))
    });
    assert!(lost.is_err());
}
