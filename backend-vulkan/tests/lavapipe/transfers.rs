//! Copies, fills and tickets.

use tensormem::{Backend, Error, MemoryKind, Ticket};

use crate::{alloc, download, on_each, on_each_front, range, upload};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn staging_round_trip_through_device_memory() {
    on_each(|name, b| {
        let n = 64 * 1024 + 12;
        let dev = alloc(b, MemoryKind::DeviceLocal, n as u64 + 64);
        let data = pattern(n, 3);
        upload(b, dev, 64, &data);
        assert_eq!(download(b, dev, 64, n as u64), data, "{name}");
        b.free_block(dev).unwrap();
    });
}

#[test]
fn chained_copies_in_one_batch_are_ordered() {
    // up → a → b → c → readback, all recorded before one wait: every step reads what the previous
    // one wrote (transfer → transfer read-after-write), and the last copy overwrites `a` while
    // it was read before (write-after-read).
    on_each(|name, b| {
        let n = 4096u64;
        let up = alloc(b, MemoryKind::Upload, n);
        let rb = alloc(b, MemoryKind::Readback, n);
        let [d0, d1, d2] = [0, 1, 2].map(|_| alloc(b, MemoryKind::DeviceLocal, n));
        let first = pattern(n as usize, 1);
        b.write_mapped(up, 0, &first).unwrap();
        let t1 = b.copy(range(up, 0, n), range(d0, 0, n)).unwrap();
        let t2 = b.copy(range(d0, 0, n), range(d1, 0, n)).unwrap();
        let t3 = b.copy(range(d1, 0, n), range(d2, 0, n)).unwrap();
        let t4 = b.fill_zero(range(d0, 0, n)).unwrap();
        let t5 = b.copy(range(d2, 0, n), range(rb, 0, n)).unwrap();
        assert!(
            t1 <= t2 && t2 <= t3 && t3 <= t4 && t4 <= t5,
            "{name}: tickets increase"
        );
        b.wait_timeout(t5, None).unwrap();
        let mut out = vec![0u8; n as usize];
        b.read_mapped(rb, 0, &mut out).unwrap();
        assert_eq!(out, first, "{name}");
        assert_eq!(
            download(b, d0, 0, n),
            vec![0u8; n as usize],
            "{name}: d0 zeroed last"
        );
        assert!(
            b.stats().barriers >= 3,
            "{name}: dependent copies got barriers"
        );
        for id in [up, rb, d0, d1, d2] {
            b.free_block(id).unwrap();
        }
    });
}

#[test]
fn fill_zero_touches_only_its_range() {
    on_each(|name, b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1024);
        let data = vec![0xEEu8; 1024];
        upload(b, dev, 0, &data);
        b.fill_zero(range(dev, 256, 512)).unwrap();
        let out = download(b, dev, 0, 1024);
        assert!(out[..256].iter().all(|&x| x == 0xEE), "{name}");
        assert!(out[256..768].iter().all(|&x| x == 0), "{name}");
        assert!(out[768..].iter().all(|&x| x == 0xEE), "{name}");
        b.free_block(dev).unwrap();
    });
}

#[test]
fn copy_and_fill_reject_bad_ranges() {
    on_each_front(|name, b| {
        let a = alloc(b, MemoryKind::DeviceLocal, 256);
        let c = alloc(b, MemoryKind::DeviceLocal, 256);
        match b.copy(range(a, 0, 64), range(c, 0, 32)) {
            Err(Error::SizeMismatch {
                expected: 64,
                actual: 32,
                ..
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
        assert!(matches!(
            b.copy(range(a, 200, 64), range(c, 0, 64)),
            Err(Error::OutOfBounds {
                offset: 200,
                size: 64,
                limit: 256,
                ..
            })
        ));
        assert!(matches!(
            b.copy(range(a, 0, 0), range(c, 0, 0)),
            Err(Error::ZeroSize { .. })
        ));
        assert!(
            matches!(
                b.copy(range(a, 0, 64), range(a, 32, 64)),
                Err(Error::Overlap { .. })
            ),
            "{name}: overlapping copy"
        );
        assert!(
            matches!(
                b.fill_zero(range(a, 2, 8)),
                Err(Error::Misaligned { value: 2, .. })
            ),
            "unaligned"
        );
        assert!(matches!(
            b.fill_zero(range(a, 0, 260)),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            b.fill_zero(range(tensormem::BlockId(u64::MAX), 0, 4)),
            Err(Error::UnknownBlock { .. })
        ));
        b.free_block(a).unwrap();
        b.free_block(c).unwrap();
    });
}

#[test]
fn tickets_complete_in_order_and_batches_recycle() {
    on_each(|name, b| {
        assert_eq!(b.completed().unwrap(), Ticket::DONE);
        assert_eq!(b.flush().unwrap(), Ticket::DONE, "nothing recorded");
        b.wait_timeout(Ticket::DONE, None).unwrap();
        let dev = alloc(b, MemoryKind::DeviceLocal, 4096);
        let mut last = Ticket::DONE;
        for round in 0..20u64 {
            let t = b.fill_zero(range(dev, (round % 4) * 1024, 1024)).unwrap();
            assert!(t >= last, "{name}");
            if round % 3 == 0 {
                let f = b.flush().unwrap();
                assert_eq!(f, t, "{name}: flush returns the last enqueued ticket");
                assert!(
                    b.fill_zero(range(dev, 0, 4)).unwrap() > f,
                    "new batch after flush"
                );
            }
            last = t;
        }
        let issued = b.flush().unwrap();
        assert!(issued.0 >= 7, "{name}: {issued:?}");
        b.wait_timeout(issued, None).unwrap();
        assert_eq!(b.completed().unwrap(), issued);
        let s = b.stats();
        assert_eq!(s.batches_in_flight, 0, "{name}");
        assert!(
            s.batches_free >= 1,
            "{name}: command batches are kept for reuse"
        );
        match b.wait_timeout(Ticket(issued.0 + 5), None) {
            Err(Error::UnknownTicket { ticket, .. }) => assert_eq!(ticket, issued.0 + 5),
            other => panic!("{name}: {other:?}"),
        }
        // Waiting on the open batch's ticket submits it.
        let open = b.fill_zero(range(dev, 0, 4)).unwrap();
        assert_eq!(open.0, issued.0 + 1);
        b.wait_timeout(open, None).unwrap();
        assert!(b.completed().unwrap() >= open);
        b.free_block(dev).unwrap();
    });
}

#[test]
fn completed_eventually_reaches_every_ticket() {
    on_each(|name, b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 20);
        let t = b.fill_zero(range(dev, 0, 1 << 20)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while b.completed().unwrap() < t {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: ticket never completed"
            );
            std::thread::yield_now();
        }
        b.free_block(dev).unwrap();
    });
}

#[test]
fn many_batches_reuse_resources() {
    on_each(|name, b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1024);
        for _ in 0..50 {
            let t = b.fill_zero(range(dev, 0, 1024)).unwrap();
            b.wait_timeout(t, None).unwrap();
        }
        let s = b.stats();
        assert!(s.batches_free + s.batches_in_flight <= 4, "{name}: {s:?}");
        b.free_block(dev).unwrap();
    });
}

#[test]
fn concurrent_callers_share_one_backend() {
    on_each(|name, b| {
        std::thread::scope(|scope| {
            for worker in 0..4u8 {
                scope.spawn(move || {
                    let n = 8192usize;
                    let dev = alloc(b, MemoryKind::DeviceLocal, n as u64);
                    let data = pattern(n, worker);
                    upload(b, dev, 0, &data);
                    assert_eq!(
                        download(b, dev, 0, n as u64),
                        data,
                        "{name} worker {worker}"
                    );
                    b.free_block(dev).unwrap();
                });
            }
        });
    });
}
