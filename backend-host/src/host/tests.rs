//! Unit tests of the host backend: the asynchronous timeline, mapping rules, fault simulation.

use std::time::Duration;

use super::*;
use crate::backend::{TransferLane, TransferLanes};

fn backend(config: HostConfig) -> HostBackend {
    HostBackend::new(config).unwrap()
}

/// A backend whose worker sleeps `delay_ms` before each command.
fn slow(delay_ms: u64) -> HostBackend {
    backend(HostConfig {
        worker_delay: Duration::from_millis(delay_ms),
        ..HostConfig::default()
    })
}

/// `N` fresh device-local blocks of [`SMALL`] bytes on `b`.
fn blocks<const N: usize>(b: &HostBackend) -> [BlockId; N] {
    std::array::from_fn(|_| {
        b.alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, SMALL, "test"))
            .unwrap()
    })
}

/// The size of the blocks [`blocks`] makes.
const SMALL: u64 = 64;

/// All of one of [`blocks`]' blocks.
fn all(block: BlockId) -> BlockRange {
    BlockRange::whole(block, SMALL)
}

/// `host`'s in-place growth granularity: a page.
pub(super) fn page_of(host: &HostBackend) -> u64 {
    host.extensions()
        .growable
        .unwrap()
        .in_place_growth()
        .granularity
}

#[test]
fn work_completes_asynchronously_in_order() {
    let b = slow(20);
    let [blk] = blocks(&b);
    b.write_mapped(blk, 0, &[7u8; 32]).unwrap();
    let r = |offset| BlockRange {
        block: blk,
        offset,
        size: 32,
    };
    let t1 = b.copy(r(0), r(32)).unwrap();
    let t2 = b.fill_zero(r(0)).unwrap();
    assert!(t2 > t1);
    // With a 20 ms worker delay, the second command cannot have finished yet.
    assert!(b.completed().unwrap() < t2);
    b.wait_timeout(t2, None).unwrap();
    assert!(b.completed().unwrap() >= t2);
    let mut out = [1u8; 64];
    b.read_mapped(blk, 0, &mut out).unwrap();
    assert_eq!(&out[..32], &[0u8; 32]);
    assert_eq!(&out[32..], &[7u8; 32]);
}

#[test]
fn waiting_for_an_unissued_ticket_is_an_error_not_a_hang() {
    let b = backend(HostConfig::default());
    assert!(matches!(
        b.wait_timeout(Ticket(99), None),
        Err(Error::UnknownTicket {
            ticket: 99,
            issued: 0
        })
    ));
    b.wait_timeout(Ticket::DONE, None).unwrap();
}

#[test]
fn unknown_blocks_and_ranges_are_typed_errors_even_without_the_front() {
    let b = backend(HostConfig::default());
    let blk = b
        .alloc_block(&BlockDesc::new(MemoryKind::Upload, 16, "test"))
        .unwrap();
    assert!(matches!(
        b.write_mapped(blk, 8, &[0; 16]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        b.write_mapped(blk, u64::MAX, &[0; 1]),
        Err(Error::OutOfBounds { .. })
    ));
    b.free_block(blk).unwrap();
    assert!(matches!(
        b.free_block(blk),
        Err(Error::UnknownBlock {
            backend: "host",
            ..
        })
    ));
}

/// Regression: a panic in the worker left every later wait, synchronize and
/// drop blocked forever while `completed()` kept answering.
#[test]
fn worker_panic_is_a_lost_device_and_nothing_hangs() {
    let b = slow(5);
    let [blk] = blocks(&b);
    let r = BlockRange {
        block: blk,
        offset: 0,
        size: 64,
    };
    let before = b.fill_zero(r).unwrap();
    let poisoned = b.simulate_worker_panic().unwrap();
    // Queued behind the panic: must complete (or be refused), never block.
    let after = b.fill_zero(r);
    assert!(matches!(
        b.wait_timeout(poisoned, None),
        Err(Error::DeviceLost { .. })
    ));
    assert!(poisoned > before);
    if let Ok(t) = after {
        assert!(matches!(
            b.wait_timeout(t, None),
            Err(Error::DeviceLost { .. })
        ));
    }
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    assert!(matches!(b.flush(), Err(Error::DeviceLost { .. })));
    assert!(matches!(b.fill_zero(r), Err(Error::DeviceLost { .. })));
    b.free_block(blk).unwrap();
    drop(b); // joins the worker: must return
}

#[test]
fn default_block_limit_is_the_machine_memory() {
    let caps = backend(HostConfig::default()).capabilities().clone();
    assert!(caps.max_block_size <= 1 << 40);
    if let Some(mem) = physical_memory() {
        assert_eq!(caps.max_block_size, mem.min(1 << 40));
    }
}

#[test]
fn device_memory_limit_and_loss() {
    let b = backend(HostConfig {
        device_memory: Some(100),
        ..HostConfig::default()
    });
    let [blk] = blocks(&b);
    let e = b
        .alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, 64, "test"))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory(_)) && e.is_retryable());
    b.simulate_device_loss();
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        b.alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, 4, "test")),
        Err(Error::DeviceLost { .. })
    ));
    // Freeing still works so a runtime can tear down.
    b.free_block(blk).unwrap();
}

/// The device memory limit models the device: on unified memory every block counts, under
/// `force_staging` (a discrete GPU) staging blocks are host memory and a full device still stages.
#[test]
fn staging_blocks_count_against_device_memory_only_on_unified_memory() {
    for force_staging in [true, false] {
        let b = backend(HostConfig {
            force_staging,
            device_memory: Some(128),
            ..HostConfig::default()
        });
        let dev = b
            .alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, 128, "test"))
            .unwrap();
        for kind in [MemoryKind::Upload, MemoryKind::Readback] {
            match b.alloc_block(&BlockDesc::new(kind, 64, "test")) {
                Ok(blk) if force_staging => b.free_block(blk).unwrap(),
                Err(Error::OutOfMemory(_)) if !force_staging => {}
                other => panic!("{kind:?} with force_staging {force_staging}: {other:?}"),
            }
        }
        assert!(matches!(
            b.alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, 4, "test")),
            Err(Error::OutOfMemory(_))
        ));
        b.free_block(dev).unwrap();
    }
}

/// Regression, the lost-device panic's trigger: op parameters whose size arithmetic overflowed or
/// truncated reached the worker and killed it. They are refused at dispatch now, even on a
/// direct call, and the device stays usable.
#[test]
fn overflowing_op_parameters_never_reach_the_worker() {
    let b = backend(HostConfig::default());
    let blk = b
        .alloc_block(&BlockDesc::new(MemoryKind::DeviceLocal, 256, "test"))
        .unwrap();
    let r = |offset| BlockRange {
        block: blk,
        offset,
        size: 16,
    };
    let conv = crate::samples::overflowing_conv();
    assert!(matches!(
        b.dispatch(&conv, &[r(0), r(64), r(128)]),
        Err(Error::ArithmeticOverflow { .. })
    ));
    let permute = Op::Permute {
        dims: [1 << 20; 4],
        perm: [1, 0, 2, 3],
    };
    assert!(matches!(
        b.dispatch(&permute, &[r(0), r(128)]),
        Err(Error::ArithmeticOverflow { .. })
    ));
    let t = b.fill_zero(r(0)).unwrap();
    b.wait_timeout(t, None).unwrap();
    assert!(b.completed().is_ok());
}

/// The transfer lane runs beside the compute lane: a copy on it completes while ten slow
/// commands are still queued on compute (a collapsed lane would finish it after all ten).
#[test]
fn transfer_lane_runs_beside_compute() {
    let b = slow(30);
    assert_eq!(b.transfer_lane(), TransferLane::Concurrent);
    let [a, c, d] = blocks(&b);
    let mut last = Ticket::DONE;
    for _ in 0..10 {
        last = b.fill_zero(all(a)).unwrap();
    }
    let t = b.transfer_copy(all(c), all(d)).unwrap();
    b.wait_transfer(t).unwrap();
    assert!(b.transfer_completed().unwrap() >= t);
    assert!(
        b.completed().unwrap() < last,
        "the transfer waited for the whole compute queue"
    );
    b.wait_timeout(last, None).unwrap();
}

/// Cross-lane order holds both ways with slow workers: the transfer after a compute ticket
/// copies that command's result, and compute after the transfer's joined ticket reads the
/// copied bytes; the compute lane's wait is counted as transfer stall.
#[test]
fn cross_lane_waits_order_both_ways() {
    let b = slow(20);
    let [src, mid, dst] = blocks(&b);
    b.write_mapped(src, 0, &[9u8; 64]).unwrap();
    let c = b.copy(all(src), all(mid)).unwrap();
    b.transfer_after(c).unwrap();
    let t = b.transfer_copy(all(mid), all(dst)).unwrap();
    b.wait_transfer(t).unwrap();
    let mut out = [0u8; 64];
    b.read_mapped(dst, 0, &mut out).unwrap();
    assert_eq!(
        out, [9u8; 64],
        "the transfer ran before the compute copy it follows"
    );

    b.write_mapped(src, 0, &[5u8; 64]).unwrap();
    let before = b.transfer_stall().unwrap();
    let t = b.transfer_copy(all(src), all(mid)).unwrap();
    let joined = b.compute_after(t).unwrap();
    let c = b.copy(all(mid), all(dst)).unwrap();
    assert!(c > joined);
    b.wait_timeout(c, None).unwrap();
    assert!(b.transfer_completed().unwrap() >= t);
    b.read_mapped(dst, 0, &mut out).unwrap();
    assert_eq!(out, [5u8; 64], "compute ran before the transfer it joins");
    assert!(
        b.transfer_stall().unwrap() > before,
        "the compute lane's wait was not counted"
    );
}

/// Transfer tickets poll without blocking and wake the task once the lane reaches them.
#[test]
fn transfer_tickets_poll_and_wake() {
    use std::task::{Context, Waker};
    let b = slow(20);
    let [a, c] = blocks(&b);
    let t = b.transfer_copy(all(a), all(c)).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(b.poll_transfer(t, &mut cx).is_pending());
    b.wait_transfer(t).unwrap();
    assert!(matches!(b.poll_transfer(t, &mut cx), Poll::Ready(Ok(()))));
    assert!(matches!(
        b.poll_transfer(TransferTicket(t.0 + 1), &mut cx),
        Poll::Ready(Err(Error::UnknownTicket { .. }))
    ));
}

/// An op's output is written in place when it is apart from the op's inputs, and through a fresh
/// buffer when a direct caller binds it over an input (`queue::dispatch`): both give the op's
/// result, and the overlapping one reads its input before overwriting it.
#[test]
fn op_outputs_in_place_or_over_an_input_give_the_same_result() {
    let b = backend(HostConfig::default());
    let [blk] = blocks(&b);
    let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    b.write_mapped(blk, 0, &floats(&[1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    b.write_mapped(blk, 16, &floats(&[10.0, 20.0, 30.0, 40.0]))
        .unwrap();
    let r = |offset| BlockRange {
        block: blk,
        offset,
        size: 16,
    };
    let add = Op::Add { len: 4, b_len: 4 };
    b.dispatch(&add, &[r(0), r(16), r(32)]).unwrap();
    let t = b.dispatch(&add, &[r(0), r(16), r(0)]).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = [0u8; 48];
    b.read_mapped(blk, 0, &mut out).unwrap();
    let want = floats(&[11.0, 22.0, 33.0, 44.0]);
    assert_eq!(&out[32..48], &want[..], "apart: written in place");
    assert_eq!(
        &out[0..16],
        &want[..],
        "over input a: through a fresh buffer"
    );
}
