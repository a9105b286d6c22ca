//! The front's rules on the host backend: each misuse gets its one typed error, and the device
//! state sticks.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::{MemoryKind, TransferLanes};
use crate::host::{HostBackend, HostConfig};
pub(super) use crate::ops::samples::support::range;

fn front(config: HostConfig) -> (Arc<HostBackend>, Validated) {
    let host = Arc::new(HostBackend::new(config).unwrap());
    let front = Validated::new(host.clone());
    (host, front)
}

/// A block of `size` bytes of `kind` from `f` (the validate tests' one allocation helper).
pub(super) fn block(f: &dyn Backend, kind: MemoryKind, size: u64) -> BlockId {
    f.alloc_block(&BlockDesc {
        kind,
        size,
        label: "test",
    })
    .unwrap()
}

#[test]
fn block_requests_are_checked_before_the_backend() {
    let (host, f) = front(HostConfig {
        max_block_size: 1 << 20,
        ..HostConfig::default()
    });
    let desc = |size| BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size,
        label: "x",
    };
    assert!(matches!(
        f.alloc_block(&desc(0)),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        f.alloc_block(&desc((1 << 20) + 4)),
        Err(Error::TooLarge {
            limit_name: "max_block_size",
            ..
        })
    ));
    assert!(matches!(
        f.alloc_block(&desc(6)),
        Err(Error::Misaligned {
            value: 6,
            align: 4,
            ..
        })
    ));
    assert_eq!(host.block_count(), 0, "nothing reached the backend");
    let b = block(&f, MemoryKind::DeviceLocal, 64);
    f.free_block(b).unwrap();
    assert!(matches!(
        f.free_block(b),
        Err(Error::UnknownBlock {
            backend: "host",
            ..
        })
    ));
}

/// Roles by kind: with the staging directions only (as WebGPU), an upload block is never written
/// by a copy and a readback block never read; where the backend copies both ways, both are.
#[test]
fn copy_directions_follow_the_backend() {
    let (_, narrow) = front(HostConfig {
        host_visible_copies: false,
        ..HostConfig::default()
    });
    let (_, wide) = front(HostConfig::default());
    for (f, both_ways) in [(&narrow, false), (&wide, true)] {
        assert_eq!(
            f.capabilities().host_visible_copies,
            both_ways,
            "the front forwards it"
        );
        let up = block(f, MemoryKind::Upload, 64);
        let down = block(f, MemoryKind::Readback, 64);
        let dev = block(f, MemoryKind::DeviceLocal, 64);
        for lane in [false, true] {
            let copy = |src, dst| {
                if lane {
                    f.transfer_copy(src, dst).map(drop)
                } else {
                    f.copy(src, dst).map(drop)
                }
            };
            let to_upload = copy(range(dev, 0, 16), range(up, 0, 16));
            let from_readback = copy(range(down, 0, 16), range(dev, 16, 16));
            if both_ways {
                to_upload.unwrap();
                from_readback.unwrap();
            } else {
                assert!(matches!(
                    to_upload,
                    Err(Error::WrongMemoryKind {
                        role: "copy destination",
                        ..
                    })
                ));
                assert!(matches!(
                    from_readback,
                    Err(Error::WrongMemoryKind {
                        role: "copy source",
                        ..
                    })
                ));
            }
        }
        f.join_transfers().unwrap();
        f.wait_timeout(f.flush().unwrap(), None).unwrap();
    }
}

#[test]
fn transfers_need_live_in_bounds_aligned_ranges() {
    let (_, f) = front(HostConfig::default());
    let up = block(&f, MemoryKind::Upload, 64);
    assert!(matches!(
        f.write_mapped(up, 60, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        f.write_mapped(up, 2, &[0; 4]),
        Err(Error::Misaligned { value: 2, .. })
    ));
    assert!(matches!(
        f.write_mapped(up, 0, &[0; 3]),
        Err(Error::Misaligned { value: 3, .. })
    ));
    assert!(matches!(
        f.write_mapped(up, 0, &[]),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        f.copy(range(up, 0, 8), range(up, 16, 4)),
        Err(Error::SizeMismatch { .. })
    ));
    let dev = block(&f, MemoryKind::DeviceLocal, 64);
    assert!(matches!(
        f.copy(range(dev, 0, 16), range(dev, 8, 16)),
        Err(Error::Overlap { .. })
    ));
    let down = block(&f, MemoryKind::Readback, 64);
    assert!(matches!(
        f.dispatch(
            &Op::Relu { len: 4 },
            &[range(down, 0, 16), range(dev, 0, 16)]
        ),
        Err(Error::WrongMemoryKind {
            role: "kernel binding",
            ..
        })
    ));
    assert!(matches!(
        f.fill_zero(range(BlockId(999), 0, 4)),
        Err(Error::UnknownBlock { block: 999, .. })
    ));
    assert!(matches!(
        f.wait_timeout(Ticket(1000), None),
        Err(Error::UnknownTicket { ticket: 1000, .. })
    ));
}

#[test]
fn force_staging_hides_device_memory_from_the_host() {
    let (_, f) = front(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    });
    let dev = block(&f, MemoryKind::DeviceLocal, 16);
    assert!(matches!(
        f.write_mapped(dev, 0, &[0; 4]),
        Err(Error::NotHostVisible { .. })
    ));
    let up = block(&f, MemoryKind::Upload, 16);
    f.write_mapped(up, 0, &[1; 16]).unwrap();
}

#[test]
fn a_segmented_output_sharing_bytes_with_an_input_segment_is_refused() {
    let (_, f) = front(HostConfig::default());
    let dev = block(&f, MemoryKind::DeviceLocal, 4096);
    let relu = Op::Relu { len: 8 };
    let x = [range(dev, 0, 16), range(dev, 1024, 16)];
    // The output's second segment is the input's first.
    let y = [range(dev, 2048, 16), range(dev, 0, 16)];
    match f.dispatch_segments(&relu, &[&x, &y]) {
        Err(Error::Overlap { what, .. }) => assert_eq!(what, "relu output `y` and operand `x`"),
        other => panic!("expected Overlap, got {other:?}"),
    }
    // Disjoint segments are issued.
    let y = [range(dev, 2048, 16), range(dev, 3072, 16)];
    let t = f.dispatch_segments(&relu, &[&x, &y]).unwrap();
    f.wait_timeout(t, None).unwrap();
}

#[test]
fn bindings_must_match_the_op_exactly_and_outputs_must_not_overlap() {
    let (_, f) = front(HostConfig::default());
    let dev = block(&f, MemoryKind::DeviceLocal, 1024);
    let relu = Op::Relu { len: 4 };
    // Oversize and undersize are the same error.
    for size in [12, 20] {
        assert!(matches!(
            f.dispatch(&relu, &[range(dev, 0, size), range(dev, 512, 16)]),
            Err(Error::BindingSize { index: 0, expected: 16, actual, .. }) if actual == size
        ));
    }
    assert!(matches!(
        f.dispatch(&relu, &[range(dev, 0, 16)]),
        Err(Error::BindingCount {
            expected: 2,
            actual: 1,
            ..
        })
    ));
    assert!(matches!(
        f.dispatch(&relu, &[range(dev, 4, 16), range(dev, 512, 16)]),
        Err(Error::Misaligned {
            align_name: "binding_align",
            ..
        })
    ));
    // In place: the output is the input.
    assert!(matches!(
        f.dispatch(&relu, &[range(dev, 0, 16), range(dev, 0, 16)]),
        Err(Error::Overlap { .. })
    ));
    // Inputs may alias each other (they are only read).
    let add = Op::Add { len: 4, b_len: 4 };
    let t = f
        .dispatch(
            &add,
            &[range(dev, 0, 16), range(dev, 0, 16), range(dev, 512, 16)],
        )
        .unwrap();
    f.wait_timeout(t, None).unwrap();
    // Shape arithmetic past u64 is refused, never wrapped.
    let huge = Op::Permute {
        dims: [u32::MAX; 4],
        perm: [0, 1, 2, 3],
    };
    assert!(matches!(
        f.dispatch(&huge, &[range(dev, 0, 16), range(dev, 512, 16)]),
        Err(Error::ArithmeticOverflow { .. })
    ));
}

#[test]
fn in_flight_uses_are_tracked_by_range_until_completion() {
    let (_, f) = front(HostConfig {
        worker_delay: Duration::from_millis(30),
        ..HostConfig::default()
    });
    let dev = block(&f, MemoryKind::DeviceLocal, 1024);
    let t = f
        .dispatch(
            &Op::Relu { len: 4 },
            &[range(dev, 0, 16), range(dev, 256, 16)],
        )
        .unwrap();
    assert_eq!(f.last_use(&range(dev, 256, 4)).unwrap(), t);
    assert_eq!(f.last_use(&range(dev, 0, 16)).unwrap(), t);
    assert_eq!(f.last_use(&range(dev, 512, 16)).unwrap(), Ticket::DONE);
    assert!(f.block_in_use(dev));
    f.wait_timeout(t, None).unwrap();
    assert_eq!(f.last_use(&range(dev, 256, 4)).unwrap(), Ticket::DONE);
}

#[test]
fn device_loss_sticks_and_frees_still_work() {
    let (host, f) = front(HostConfig::default());
    let dev = block(&f, MemoryKind::DeviceLocal, 64);
    host.simulate_device_loss();
    assert!(matches!(f.flush(), Err(Error::DeviceLost { .. })));
    assert!(f.is_broken());
    assert!(matches!(
        f.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 64,
            label: "x"
        }),
        Err(Error::DeviceLost { .. })
    ));
    f.free_block(dev).unwrap();
}

#[test]
fn an_invariant_violation_marks_the_device_broken() {
    let (_, f) = front(HostConfig::default());
    let e = f.mark_broken(Error::invariant("test invariant", "observed"));
    assert!(matches!(e, Error::InvariantViolated { .. }));
    match f.completed() {
        Err(Error::DeviceLost { detail, .. }) => assert!(detail.contains("test invariant")),
        other => panic!("expected DeviceLost, got {other:?}"),
    }
}

/// The lost worker (`host::tests::worker_panic_is_a_lost_device_and_nothing_hangs`) through the
/// front: after the worker dies every call is `DeviceLost` and the
/// front remembers it.
#[test]
fn a_dead_worker_is_a_lost_device_for_the_front() {
    let (host, f) = front(HostConfig::default());
    let t = host.simulate_worker_panic().unwrap();
    assert!(matches!(
        f.wait_timeout(t, None),
        Err(Error::DeviceLost { .. })
    ));
    assert!(f.is_broken());
    assert!(matches!(f.completed(), Err(Error::DeviceLost { .. })));
}

/// Lowered limits are what the front reports and enforces (blocks, bindings, growth), a binding
/// limit never exceeds the block limit, and a limit below the alignment is refused.
#[test]
fn lowered_limits_are_reported_and_enforced() {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let f = Validated::new(host.clone())
        .with_limits(DeviceLimits {
            max_block_size: Some(8192),
            max_binding_size: Some(1 << 20),
        })
        .unwrap();
    let caps = f.capabilities();
    assert_eq!((caps.max_block_size, caps.max_binding_size), (8192, 8192));
    assert!(matches!(
        f.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 8196,
            label: "x",
        }),
        Err(Error::TooLarge {
            limit: 8192,
            limit_name: "max_block_size",
            ..
        })
    ));
    let b = block(&f, MemoryKind::DeviceLocal, 8192);
    assert!(
        f.extensions()
            .growable
            .map(|g| g.in_place_growth())
            .is_none_or(|g| g.max_reserve <= 8192 && g.max_reserve > 0)
    );
    let relu = Op::Relu { len: 1024 };
    let binding = Validated::new(host.clone())
        .with_limits(DeviceLimits {
            max_block_size: None,
            max_binding_size: Some(2048),
        })
        .unwrap();
    assert_eq!(
        binding.capabilities().max_block_size,
        host.capabilities().max_block_size
    );
    let b2 = block(&binding, MemoryKind::DeviceLocal, 8192);
    // Over 2 KiB, relu runs as parts: accepted, not refused as too large.
    let t = binding
        .dispatch(&relu, &[range(b2, 0, 4096), range(b2, 4096, 4096)])
        .unwrap();
    binding.wait_timeout(t, None).unwrap();
    for bad in [
        DeviceLimits {
            max_block_size: Some(8),
            max_binding_size: None,
        },
        DeviceLimits {
            max_block_size: Some(8190),
            max_binding_size: None,
        },
        DeviceLimits {
            max_block_size: None,
            max_binding_size: Some(0),
        },
    ] {
        assert!(
            matches!(
                Validated::new(host.clone()).with_limits(bad),
                Err(Error::Argument(crate::ArgumentError::Invalid { .. })
                    | Error::Misaligned { .. })
            ),
            "{bad:?}"
        );
    }
    f.free_block(b).unwrap();
    binding.free_block(b2).unwrap();
}
