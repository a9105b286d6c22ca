//! Tickets: monotonic, completed in order, `wait` submits what it needs, bad tickets rejected.

use tensormem::{Backend, Error, MemoryKind, Ticket};

use super::{alloc, each_config, range};

#[test]
fn tickets_increase_and_complete() {
    each_config(|b| {
        assert!(b.completed().unwrap() >= Ticket::DONE);
        b.wait_timeout(Ticket::DONE, None).unwrap();
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
        b.wait_timeout(c, None).unwrap();
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
        let err = b.wait_timeout(Ticket(last.0 + 5), None).unwrap_err();
        assert!(matches!(err, Error::UnknownTicket { .. }), "{err}");
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

/// The awaitable forms: a ticket future resolves after the work, a host-access future maps a
/// readback block so that `read_mapped` needs no blocking wait, and a never-issued ticket fails.
#[test]
fn ticket_and_host_access_futures() {
    use tensormem::{HostAccess, HostAccessWait, TicketWait};
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 16);
        let rb = alloc(b, MemoryKind::Readback, 1 << 16);
        b.fill_zero(range(dev, 0, 1 << 16)).unwrap();
        let t = b
            .copy(range(dev, 0, 1 << 16), range(rb, 0, 1 << 16))
            .unwrap();
        pollster::block_on(TicketWait::new(b, t)).unwrap();
        assert!(b.completed().unwrap() >= t);
        pollster::block_on(HostAccessWait::new(b, rb, HostAccess::Read)).unwrap();
        let mut out = vec![1u8; 1 << 16];
        b.read_mapped(rb, 0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 0));
        let never = Ticket(t.0 + 100);
        assert!(matches!(
            pollster::block_on(TicketWait::new(b, never)),
            Err(Error::UnknownTicket { .. })
        ));
        b.free_block(rb).unwrap();
        b.free_block(dev).unwrap();
    });
}

/// Kernel parameters come from a ring: thousands of dispatches whose work completes reuse a few
/// uniform buffers instead of creating one each (regression guard for the per-dispatch buffer).
#[test]
fn kernel_parameters_reuse_the_ring() {
    use tensormem::ops::Op;
    let b = super::backend(false);
    let n = 256u64;
    let dev = alloc(&b, MemoryKind::DeviceLocal, 1 << 16);
    let align = b.capabilities().binding_align.max(n * 4);
    for i in 0..2000 {
        let t = b
            .dispatch(
                &Op::Relu { len: n as u32 },
                &[range(dev, 0, n * 4), range(dev, align, n * 4)],
            )
            .unwrap();
        if i % 100 == 99 {
            b.wait_timeout(t, None).unwrap();
        }
    }
    b.wait_timeout(b.flush().unwrap(), None).unwrap();
    let rings = b.param_ring_buffers();
    assert!(
        (1..=2).contains(&rings),
        "{rings} parameter buffers for 2000 dispatches"
    );
    b.free_block(dev).unwrap();
}
