//! Tickets: monotonic, completed in order, `wait` submits what it needs, bad tickets rejected.

use tensormem::{Backend, Error, MemoryKind, Ticket};

use super::{alloc, each_config, range};

#[test]
fn tickets_increase_and_complete() {
    each_config(|b| {
        assert!(b.completed().unwrap() >= Ticket::DONE);
        b.wait(Ticket::DONE).unwrap();
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 16);
        let mut last = b.flush().unwrap();
        for i in 0..20u64 {
            let t = b.fill_zero(range(dev, 0, 4096)).unwrap();
            assert!(t >= last, "ticket {t:?} after {last:?}");
            if i % 4 == 0 {
                let f = b.flush().unwrap();
                assert_eq!(f, t, "flush returns the last enqueued ticket");
                let next = b.fill_zero(range(dev, 4096, 4096)).unwrap();
                assert!(next > f, "work after a flush gets a later ticket");
                last = next;
            } else {
                last = t;
            }
        }
        // Batched work shares a ticket until something submits.
        let a = b.fill_zero(range(dev, 0, 4)).unwrap();
        let c = b.fill_zero(range(dev, 4, 4)).unwrap();
        assert_eq!(a, c);
        b.wait(c).unwrap();
        let done = b.completed().unwrap();
        assert!(done >= c, "completed {done:?} after waiting for {c:?}");
        // A flush with nothing enqueued returns the last ticket and completes.
        assert_eq!(b.flush().unwrap(), c);
        b.free_block(dev).unwrap();
    });
}

#[test]
fn completed_eventually_reaches_every_ticket() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 20);
        let t = b.fill_zero(range(dev, 0, 1 << 20)).unwrap();
        // completed() submits the batch; polling it must converge without wait().
        let mut done = b.completed().unwrap();
        let start = std::time::Instant::now();
        while done < t {
            assert!(
                start.elapsed().as_secs() < 30,
                "ticket {t:?} never completed"
            );
            std::thread::yield_now();
            done = b.completed().unwrap();
        }
        // Monotonic afterwards.
        assert!(b.completed().unwrap() >= done);
        b.free_block(dev).unwrap();
    });
}

#[test]
fn waiting_for_an_unissued_ticket_is_an_error() {
    each_config(|b| {
        let last = b.flush().unwrap();
        let err = b.wait(Ticket(last.0 + 5)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    });
}

#[test]
fn tickets_are_shared_across_threads() {
    let b = std::sync::Arc::new(super::backend(true));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let b = std::sync::Arc::clone(&b);
            std::thread::spawn(move || {
                let dev = alloc(b.as_ref(), MemoryKind::DeviceLocal, 4096);
                let data = super::bytes(i, 4096);
                super::upload(&b, range(dev, 0, 4096), &data);
                assert_eq!(super::download(&b, range(dev, 0, 4096)), data);
                b.free_block(dev).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
