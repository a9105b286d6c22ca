//! The completion futures and ticket wakers of the backend contract, driven by the host backend.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tensormem::backend::completion::*;
use tensormem::backend::{Backend, BlockRange, MemoryKind, Ticket};
use tensormem::{BlockDesc, DType, Error, HostBackend, HostConfig, Result, Runtime, RuntimeConfig};

/// A waker that counts its wakes.
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn slow_host() -> HostBackend {
    HostBackend::new(HostConfig {
        worker_delay: Duration::from_millis(30),
        ..HostConfig::default()
    })
    .unwrap()
}

fn busy_ticket(backend: &HostBackend) -> Ticket {
    let block = backend
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 256,
            label: "t",
        })
        .unwrap();
    backend
        .fill_zero(BlockRange {
            block,
            offset: 0,
            size: 256,
        })
        .unwrap()
}

#[test]
fn complete_now_runs_a_ready_future_and_reports_a_pending_one() {
    assert_eq!(complete_now(async { Ok(7) }).unwrap(), 7);
    let pending = std::future::pending::<Result<()>>();
    assert!(matches!(complete_now(pending), Err(Error::Backend { .. })));
}

#[test]
fn host_worker_wakes_a_pending_ticket_exactly() {
    let backend = slow_host();
    let ticket = busy_ticket(&backend);
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    let mut wait = TicketWait::new(&backend, ticket);
    assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
    assert_eq!(counter.0.load(Ordering::SeqCst), 0, "no busy wake");
    backend.wait_timeout(ticket, None).unwrap();
    // The worker publishes the ticket, then wakes: allow it a moment to reach the waker.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counter.0.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        1,
        "woken once by the worker"
    );
    assert!(matches!(
        Pin::new(&mut wait).poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
}

#[test]
fn a_ticket_never_issued_is_an_error_not_a_hang() {
    let backend = slow_host();
    let mut cx = Context::from_waker(Waker::noop());
    let r = backend.poll_ticket(Ticket(99), &mut cx);
    assert!(
        matches!(r, Poll::Ready(Err(Error::UnknownTicket { .. }))),
        "{r:?}"
    );
    // The default (polling) implementation says the same.
    let r = poll_ticket_by_polling(&backend, Ticket(99), &mut cx);
    assert!(
        matches!(r, Poll::Ready(Err(Error::UnknownTicket { .. }))),
        "{r:?}"
    );
}

#[test]
fn a_lost_device_fails_the_future() {
    let backend = slow_host();
    let ticket = busy_ticket(&backend);
    backend.simulate_device_loss();
    let r = pollster::block_on(TicketWait::new(&backend, ticket));
    assert!(matches!(r, Err(Error::DeviceLost { .. })), "{r:?}");
}

#[test]
fn wakers_are_taken_once_their_ticket_completes() {
    let mut w = TicketWakers::default();
    let noop = Waker::noop();
    w.register(Ticket(3), noop);
    w.register(Ticket(3), noop); // the same task again: replaced, not duplicated
    w.register(Ticket(5), noop);
    assert_eq!(w.take_completed(Ticket(2)).len(), 0);
    assert_eq!(w.take_completed(Ticket(4)).len(), 1);
    assert_eq!(w.take_all().len(), 1);
    assert_eq!(w.take_all().len(), 0);
}

/// The async forms and the blocking forms give the same bytes, on the zero-copy and the staged
/// path, with the worker slow enough that every wait is really pending.
#[test]
fn async_transfers_match_blocking_ones() {
    for force_staging in [false, true] {
        let backend = Arc::new(
            HostBackend::new(HostConfig {
                force_staging,
                worker_delay: Duration::from_millis(2),
                ..HostConfig::default()
            })
            .unwrap(),
        );
        let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
        let data: Vec<u32> = (0..10_001u32)
            .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(i))
            .collect();
        let a = pollster::block_on(rt.tensor_from_async(DType::U32, &[data.len()], &data, "a"))
            .unwrap();
        let b = rt
            .tensor_from(DType::U32, &[data.len()], &data, "b")
            .unwrap();
        let from_async: Vec<u32> = pollster::block_on(rt.download_async(&b)).unwrap();
        assert_eq!(from_async, data);
        assert_eq!(rt.download::<u32>(&a).unwrap(), data);
        pollster::block_on(rt.synchronize_async()).unwrap();
        rt.free(a).unwrap();
        rt.free(b).unwrap();
        rt.check_leaks().unwrap();
    }
}
