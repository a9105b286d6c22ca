//! The transfer lane: its own timeline beside the compute lane, cross-lane orders as semaphore
//! waits (synchronization validation checks each one), and the two regressions the submission
//! rules prevent (a join nobody submits, a wait queued before its signal).

use std::time::Duration;

use tensormem::{Backend, MemoryKind, Op, TransferLane, TransferLanes, TransferTicket};
use tensormem_vulkan::{LaneQueue, TransferQueue, VulkanBackend};

use crate::{alloc, bytes_f32, f32_bytes, on_each, range};

const N: u64 = 1024;

/// A wait long enough for lavapipe under validation, short enough that a deadlock fails the
/// test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(20);

fn concurrent(b: &VulkanBackend) -> bool {
    b.transfer_lane() == TransferLane::Concurrent
}

#[test]
fn lane_is_concurrent_unless_switched_off() {
    on_each(|name, b| {
        let off = b.config().transfer_queue == TransferQueue::Off;
        assert_eq!(b.transfer_queue().is_none(), off, "{name}");
        assert_eq!(concurrent(b), !off, "{name}");
        if b.capabilities().device_type == tensormem::DeviceType::SoftwareGpu && !off {
            // lavapipe: one family with one queue.
            assert_eq!(b.transfer_queue(), Some(LaneQueue::SameQueue), "{name}");
        }
    });
}

/// Rounds of upload → (transfer) device → relu (compute) → (transfer) readback, each order a
/// cross-lane wait, none waited for on the host until the end. Round `r + 1`'s copy in
/// overwrites the bytes round `r`'s kernel read: the lane's order after that kernel covers it.
#[test]
fn ping_pong_between_lanes_is_ordered() {
    on_each(|name, b| {
        let rounds = 12;
        let a = alloc(b, MemoryKind::DeviceLocal, N * 4);
        let c = alloc(b, MemoryKind::DeviceLocal, N * 4);
        let mut blocks = Vec::new();
        let mut last = TransferTicket::DONE;
        let mut want = Vec::new();
        for r in 0..rounds {
            let x: Vec<f32> = (0..N)
                .map(|i| (i as f32 - 500.0) * (r as f32 + 1.0))
                .collect();
            let up = alloc(b, MemoryKind::Upload, N * 4);
            let rb = alloc(b, MemoryKind::Readback, N * 4);
            b.write_mapped(up, 0, &f32_bytes(&x)).unwrap();
            let t_in = b
                .transfer_copy(range(up, 0, N * 4), range(a, 0, N * 4))
                .unwrap();
            b.compute_after(t_in).unwrap();
            let k = b
                .dispatch(
                    &Op::Relu { len: N as u32 },
                    &[range(a, 0, N * 4), range(c, 0, N * 4)],
                )
                .unwrap();
            b.transfer_after(k).unwrap();
            last = b
                .transfer_copy(range(c, 0, N * 4), range(rb, 0, N * 4))
                .unwrap();
            want.push(x.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>());
            blocks.push((up, rb));
        }
        b.wait_transfer_timeout(last, Some(LIMIT)).unwrap();
        assert!(b.transfer_completed().unwrap() >= last, "{name}");
        for (r, &(up, rb)) in blocks.iter().enumerate() {
            let mut out = vec![0u8; (N * 4) as usize];
            b.read_mapped(rb, 0, &mut out).unwrap();
            assert_eq!(bytes_f32(&out), want[r], "{name}: round {r}");
            b.free_block(up).unwrap();
            b.free_block(rb).unwrap();
        }
        b.free_block(a).unwrap();
        b.free_block(c).unwrap();
    });
}

/// Regression: a joined ticket with no compute work after it must still be submitted, or a
/// wait for it never returns.
#[test]
fn joined_ticket_completes_without_later_compute_work() {
    on_each(|name, b| {
        let up = alloc(b, MemoryKind::Upload, N);
        let dev = alloc(b, MemoryKind::DeviceLocal, N);
        b.write_mapped(up, 0, &vec![5u8; N as usize]).unwrap();
        let t = b.transfer_copy(range(up, 0, N), range(dev, 0, N)).unwrap();
        let joined = b.compute_after(t).unwrap();
        b.wait_timeout(joined, Some(LIMIT)).unwrap();
        assert!(b.completed().unwrap() >= joined, "{name}");
        assert!(
            b.transfer_completed().unwrap() >= t,
            "{name}: the join covers the transfer"
        );
        b.free_block(up).unwrap();
        b.free_block(dev).unwrap();
    });
}

/// Regression: the lane ordered after a compute ticket still being recorded (the open batch),
/// then compute joined to that transfer. Were the transfer's wait submitted before the compute
/// batch that signals it, or the join added to that open batch, the two lanes would wait for
/// each other.
#[test]
fn orders_on_unsubmitted_work_do_not_deadlock() {
    on_each(|name, b| {
        let x: Vec<f32> = (0..N).map(|i| i as f32 - 300.0).collect();
        let up = alloc(b, MemoryKind::Upload, N * 4);
        let rb = alloc(b, MemoryKind::Readback, N * 4);
        let [a, c, d] = [0; 3].map(|_| alloc(b, MemoryKind::DeviceLocal, N * 4));
        b.write_mapped(up, 0, &f32_bytes(&x)).unwrap();
        let whole = |id| range(id, 0, N * 4);
        let t0 = b.transfer_copy(whole(up), whole(a)).unwrap();
        b.compute_after(t0).unwrap();
        let k = b
            .dispatch(&Op::Relu { len: N as u32 }, &[whole(a), whole(c)])
            .unwrap();
        b.transfer_after(k).unwrap();
        let t1 = b.transfer_copy(whole(c), whole(d)).unwrap();
        b.compute_after(t1).unwrap();
        let k2 = b
            .dispatch(&Op::Relu { len: N as u32 }, &[whole(d), whole(a)])
            .unwrap();
        let out = b.copy(whole(a), whole(rb)).unwrap();
        assert!(out >= k2, "{name}");
        b.wait_timeout(out, Some(LIMIT)).unwrap();
        let mut got = vec![0u8; (N * 4) as usize];
        b.read_mapped(rb, 0, &mut got).unwrap();
        let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
        assert_eq!(bytes_f32(&got), want, "{name}");
        for id in [up, rb, a, c, d] {
            b.free_block(id).unwrap();
        }
    });
}

/// Tickets never issued are refused by the backend itself (a direct caller has no front), on
/// both lanes, collapsed or not, and nothing waits for them.
#[test]
fn tickets_never_issued_are_refused() {
    on_each(|name, b| {
        let never = 1_000_000;
        for got in [
            b.transfer_after(tensormem::Ticket(never)),
            b.compute_after(TransferTicket(never)).map(drop),
            b.wait_transfer_timeout(TransferTicket(never), Some(LIMIT)),
        ] {
            match got {
                Err(tensormem::Error::UnknownTicket { ticket, .. }) if ticket == never => {}
                other => panic!("{name}: {other:?}"),
            }
        }
    });
}

/// The compute lane's wait for a long transfer-lane copy is measured (timestamps on the compute
/// queue around the join): it grows by at most the wall time of the sequence, and a
/// `compute_after` on a transfer that already finished adds nothing. With the lane off there are
/// no cross-lane waits and nothing is reported.
#[test]
fn the_compute_lanes_wait_for_a_long_copy_is_the_measured_stall() {
    on_each(|name, b| {
        if !concurrent(b) {
            assert_eq!(b.transfer_stall(), None, "{name}: collapsed lane");
            return;
        }
        let before = b
            .transfer_stall()
            .expect("lavapipe's compute queue writes timestamps");
        let big: u64 = 32 << 20;
        let small = alloc(b, MemoryKind::DeviceLocal, N * 4);
        let small2 = alloc(b, MemoryKind::DeviceLocal, N * 4);
        let src = alloc(b, MemoryKind::DeviceLocal, big);
        let dst = alloc(b, MemoryKind::DeviceLocal, big);
        let started = std::time::Instant::now();
        // Compute work, submitted before the copies (the order after it issues it), so the
        // compute queue finishes it and then waits.
        let c = b
            .copy(range(small, 0, N * 4), range(small2, 0, N * 4))
            .unwrap();
        b.transfer_after(c).unwrap();
        let mut t = TransferTicket::DONE;
        for _ in 0..4 {
            t = b
                .transfer_copy(range(src, 0, big), range(dst, 0, big))
                .unwrap();
        }
        b.compute_after(t).unwrap();
        let c = b
            .copy(range(small2, 0, N * 4), range(small, 0, N * 4))
            .unwrap();
        b.wait_timeout(c, Some(LIMIT)).unwrap();
        let wall = started.elapsed();
        let after = b.transfer_stall().unwrap();
        assert!(after > before, "{name}: the wait was not measured");
        assert!(
            after - before <= wall,
            "{name}: a stall of {:?} in {wall:?}",
            after - before
        );
        // Finished already: no wait is submitted, so nothing is added.
        b.wait_transfer_timeout(t, Some(LIMIT)).unwrap();
        b.compute_after(t).unwrap();
        let c = b
            .copy(range(small, 0, N * 4), range(small2, 0, N * 4))
            .unwrap();
        b.wait_timeout(c, Some(LIMIT)).unwrap();
        assert_eq!(b.transfer_stall().unwrap(), after, "{name}");
        for block in [small, small2, src, dst] {
            b.free_block(block).unwrap();
        }
    });
}
