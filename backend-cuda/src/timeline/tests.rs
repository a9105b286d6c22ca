use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use tensormem_contract::Error;

use super::*;
use crate::error::BACKEND;

/// A fake stream: every recorded event is passed once `gpu_done` is set; `fail` makes queries and
/// synchronisations report a sticky error.
#[derive(Default)]
struct Fake {
    gpu_done: AtomicBool,
    fail: AtomicBool,
    created: AtomicUsize,
    recorded: AtomicUsize,
}

fn lost() -> Error {
    Error::DeviceLost {
        backend: BACKEND,
        detail: "cuEventQuery returned CUDA_ERROR_ILLEGAL_ADDRESS".into(),
    }
}

impl EventOps for Fake {
    type Event = ();
    fn create(&self) -> Result<()> {
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn record(&self, _: &()) -> Result<()> {
        self.recorded.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn query(&self, _: &()) -> Result<bool> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(lost());
        }
        Ok(self.gpu_done.load(Ordering::SeqCst))
    }
    fn synchronize(&self, _: &()) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(lost());
        }
        self.gpu_done.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn events_sleep_instead_of_spinning() {
    assert_ne!(
        cuda::EVENT_FLAGS & CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32,
        0
    );
    assert_ne!(
        cuda::EVENT_FLAGS & CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        0
    );
}

#[test]
fn one_event_per_flush_and_waits_retire_it() {
    let t = Timeline::new(Fake::default());
    for i in 1..=3 {
        assert_eq!(t.submit(|| Ok(())).unwrap(), Ticket(i));
    }
    assert_eq!(t.completed().unwrap(), Ticket::DONE);
    assert_eq!(t.ops().recorded.load(Ordering::SeqCst), 1);
    t.wait(Ticket(2), None).unwrap();
    assert_eq!(t.completed().unwrap(), Ticket(3));
    // Nothing new was issued: no second record; the retired event is reused later.
    assert_eq!(t.ops().recorded.load(Ordering::SeqCst), 1);
    t.submit(|| Ok(())).unwrap();
    t.flush().unwrap();
    assert_eq!(t.ops().created.load(Ordering::SeqCst), 1);
    assert!(matches!(
        t.wait(Ticket(9), None),
        Err(Error::UnknownTicket { ticket: 9, .. })
    ));
}

#[test]
fn completed_does_not_block_while_a_submission_is_stuck_in_the_driver() {
    let t = Arc::new(Timeline::new(Fake::default()));
    t.submit(|| Ok(())).unwrap();
    t.flush().unwrap();
    t.ops().gpu_done.store(true, Ordering::SeqCst);

    let (inside_tx, inside_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let stuck = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            t.submit(|| {
                inside_tx.send(()).unwrap();
                // A launch into a full queue, or a pageable copy: blocks until released.
                release_rx.recv().unwrap();
                Ok(())
            })
        })
    };
    inside_rx.recv().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    {
        let t = Arc::clone(&t);
        thread::spawn(move || done_tx.send(t.completed()).unwrap());
    }
    let polled = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("completed() blocked behind a submission in progress");
    assert_eq!(polled.unwrap(), Ticket(1));
    release_tx.send(()).unwrap();
    assert_eq!(stuck.join().unwrap().unwrap(), Ticket(2));
    assert_eq!(t.completed().unwrap(), Ticket(2));
}

#[test]
fn a_sticky_error_fails_every_later_call_even_waits_on_retired_tickets() {
    let t = Timeline::new(Fake::default());
    t.submit(|| Ok(())).unwrap();
    t.wait(Ticket(1), None).unwrap();
    t.submit(|| Ok(())).unwrap();
    t.ops().gpu_done.store(false, Ordering::SeqCst);
    t.ops().fail.store(true, Ordering::SeqCst);
    assert!(matches!(t.completed(), Err(Error::DeviceLost { .. })));
    // The driver would now report success again for a retired ticket; the latch does not.
    t.ops().fail.store(false, Ordering::SeqCst);
    assert!(matches!(
        t.wait(Ticket(1), None),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(t.flush(), Err(Error::DeviceLost { .. })));
    let called = AtomicBool::new(false);
    let submitted = t.submit(|| {
        called.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert!(matches!(submitted, Err(Error::DeviceLost { .. })));
    assert!(
        !called.load(Ordering::SeqCst),
        "no work is enqueued on a lost device"
    );
    assert!(t.health().is_lost());
}

#[test]
fn a_failed_enqueue_issues_no_ticket_and_a_sticky_one_is_remembered() {
    let t = Timeline::new(Fake::default());
    assert!(t.submit(|| Err(Error::invalid("bad launch"))).is_err());
    assert_eq!(t.submit(|| Ok(())).unwrap(), Ticket(1));
    assert!(t.submit(|| Err(lost())).is_err());
    assert!(matches!(t.completed(), Err(Error::DeviceLost { .. })));
}

#[test]
fn a_timed_wait_polls_until_its_limit_then_times_out_and_leaves_the_ticket_waitable() {
    let t = Timeline::new(Fake::default());
    t.submit(|| Ok(())).unwrap();
    // The fake GPU never passes the event: the limited wait must give up, not synchronize.
    match t.wait(Ticket(1), Some(Duration::from_millis(20))) {
        Err(Error::Timeout { timeout, what, .. }) => {
            assert_eq!(timeout, Duration::from_millis(20));
            assert_eq!(what, "ticket 1");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(t.completed().unwrap() < Ticket(1));
    // The work finishes later: a limited wait now succeeds and retires the ticket.
    t.ops().gpu_done.store(true, Ordering::SeqCst);
    t.wait(Ticket(1), Some(Duration::from_secs(5))).unwrap();
    assert_eq!(t.completed().unwrap(), Ticket(1));
    // `Duration::MAX` is no limit: it synchronizes.
    t.submit(|| Ok(())).unwrap();
    t.ops().gpu_done.store(false, Ordering::SeqCst);
    t.wait(Ticket(2), Some(Duration::MAX)).unwrap();
    assert!(t.ops().gpu_done.load(Ordering::SeqCst));
}
