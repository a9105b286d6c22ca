//! The transfer lane's stall on the device: the compute stream's wait for a long copy on the
//! copy stream is timed between two events (`cuEventElapsedTime`), read once it has passed.

use std::time::{Duration, Instant};

use tensormem::{Backend, MemoryKind, TransferLanes, TransferTicket};

use crate::{alloc, backend, range};

#[test]
fn the_compute_streams_wait_for_a_long_copy_is_the_measured_stall() {
    let Some(b) = backend() else { return };
    let before = b
        .transfer_stall()
        .expect("CUDA times the compute stream's waits");
    let big: u64 = 256 << 20;
    let small: u64 = 4096;
    // Pinned host to device: a link's speed, milliseconds for 1 GiB on any link.
    let up = alloc(&b, MemoryKind::Upload, big);
    let dev = alloc(&b, MemoryKind::DeviceLocal, big);
    let (s1, s2) = (
        alloc(&b, MemoryKind::DeviceLocal, small),
        alloc(&b, MemoryKind::DeviceLocal, small),
    );
    let started = Instant::now();
    let c = b.copy(range(s1, 0, small), range(s2, 0, small)).unwrap();
    b.transfer_after(c).unwrap();
    let mut t = TransferTicket::DONE;
    for _ in 0..4 {
        t = b
            .transfer_copy(range(up, 0, big), range(dev, 0, big))
            .unwrap();
    }
    b.compute_after(t).unwrap();
    let c = b.copy(range(s2, 0, small), range(s1, 0, small)).unwrap();
    b.wait_timeout(c, None).unwrap();
    let wall = started.elapsed();
    let after = b.transfer_stall().unwrap();
    let stall = after - before;
    eprintln!("stall of a 1 GiB upload: {stall:?} in {wall:?}");
    assert!(
        stall > Duration::from_micros(500),
        "the wait for 1 GiB was not measured: {stall:?}"
    );
    assert!(stall <= wall, "a stall of {stall:?} in {wall:?}");
    // A wait on a copy that already finished holds the stream for next to nothing.
    b.wait_transfer(t).unwrap();
    b.compute_after(t).unwrap();
    let c = b.copy(range(s1, 0, small), range(s2, 0, small)).unwrap();
    b.wait_timeout(c, None).unwrap();
    let again = b.transfer_stall().unwrap() - after;
    assert!(again < Duration::from_millis(1), "{again:?}");
    for block in [up, dev, s1, s2] {
        b.free_block(block).unwrap();
    }
}
