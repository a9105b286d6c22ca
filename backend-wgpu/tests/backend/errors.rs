//! Bad input and device failures are errors with numbers, never panics.

use tensormem::ops::Op;
use tensormem::{Backend, BlockDesc, BlockId, Error, MemoryKind};

use super::{alloc, backend, each_config, each_front, range};

#[test]
fn capabilities_are_consistent() {
    each_config(|b| {
        let caps = b.capabilities();
        assert_eq!(caps.backend, "wgpu");
        assert!(caps.binding_align.is_power_of_two() && caps.binding_align >= 4);
        assert_eq!(caps.copy_align, 4);
        assert!(caps.max_binding_size <= caps.max_block_size);
        assert_eq!(
            caps.queued_write_max,
            tensormem_wgpu::DEFAULT_QUEUED_WRITE_MAX
        );
        if b.config().force_staging {
            assert!(!caps.device_host_visible);
        }
    });
}

#[test]
fn lavapipe_is_zero_copy_unless_staging_is_forced() {
    let b = backend(false);
    let info = b.device().adapter_info();
    if info.device_type == wgpu::DeviceType::Cpu {
        assert!(b.capabilities().device_host_visible, "{info:?}");
    }
    assert!(!backend(true).capabilities().device_host_visible);
}

#[test]
fn bad_block_requests() {
    each_front(|b| {
        let zero = b.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 0,
            label: "zero",
        });
        assert!(matches!(zero, Err(Error::ZeroSize { what: "block" })));
        let max = b.capabilities().max_block_size;
        let huge = b.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: max + 4,
            label: "huge",
        });
        match huge {
            Err(Error::TooLarge {
                requested, limit, ..
            }) => assert_eq!((requested, limit), (max + 4, max)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let id = alloc(b, MemoryKind::Upload, 64);
        b.free_block(id).unwrap();
        assert!(matches!(
            b.free_block(id),
            Err(Error::UnknownBlock {
                backend: "wgpu",
                ..
            })
        ));
        assert!(matches!(
            b.write_mapped(id, 0, &[0; 4]),
            Err(Error::UnknownBlock { .. })
        ));
        assert!(matches!(
            b.free_block(BlockId(u64::MAX)),
            Err(Error::UnknownBlock { .. })
        ));
    });
}

#[test]
fn out_of_bounds_and_misaligned_ranges() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1024);
        let up = alloc(b, MemoryKind::Upload, 1024);
        let rb = alloc(b, MemoryKind::Readback, 1024);
        let oob = b.copy(range(up, 1000, 32), range(dev, 0, 32)).unwrap_err();
        assert!(
            matches!(
                oob,
                Error::OutOfBounds {
                    offset: 1000,
                    size: 32,
                    limit: 1024,
                    ..
                }
            ),
            "{oob}"
        );
        let overflow = b.fill_zero(range(dev, u64::MAX - 3, 8)).unwrap_err();
        assert!(matches!(overflow, Error::OutOfBounds { .. }), "{overflow}");
        let mismatch = b.copy(range(up, 0, 32), range(dev, 0, 64)).unwrap_err();
        assert!(matches!(
            mismatch,
            Error::SizeMismatch {
                expected: 32,
                actual: 64,
                ..
            }
        ));
        let misaligned = b.copy(range(up, 2, 32), range(dev, 0, 32)).unwrap_err();
        assert!(
            matches!(misaligned, Error::Misaligned { .. }),
            "{misaligned}"
        );
        let zero = b.fill_zero(range(dev, 0, 0)).unwrap_err();
        assert!(matches!(zero, Error::ZeroSize { .. }), "{zero}");
        // Wrong roles: an upload block cannot be a copy destination, a readback one a source.
        assert!(matches!(
            b.copy(range(dev, 0, 32), range(up, 0, 32)),
            Err(Error::WrongMemoryKind { .. })
        ));
        assert!(matches!(
            b.copy(range(rb, 0, 32), range(dev, 0, 32)),
            Err(Error::WrongMemoryKind { .. })
        ));
        let mut out = [0u8; 8];
        assert!(matches!(
            b.read_mapped(rb, 1020, &mut out),
            Err(Error::OutOfBounds { .. })
        ));
        let queued = b.write_queued(range(dev, 1020, 8), &[0; 8]).unwrap_err();
        assert!(matches!(queued, Error::OutOfBounds { .. }), "{queued}");
        // The device is still healthy after all of that.
        b.fill_zero(range(dev, 0, 1024)).unwrap();
        b.wait_timeout(b.flush().unwrap(), None).unwrap();
        for id in [dev, up, rb] {
            b.free_block(id).unwrap();
        }
    });
}

/// An op over a binding one element beyond `max_storage_buffer_binding_size` (the contract's
/// `max_binding_size`) runs: the validating front splits it into parts that fit (the backend
/// itself assumes validated bindings; the parts' results are checked by the conformance case
/// `ops_split_across_bindings`).
#[test]
fn an_op_over_the_binding_limit_runs_as_parts() {
    each_front(|b| {
        let limit = b.capabilities().max_binding_size;
        let len = (limit / 4 + 1) as u32; // one element past the limit
        let size = u64::from(len) * 4;
        if size > b.capabilities().max_block_size / 2 {
            return; // Cannot build the case on this device.
        }
        let dev = alloc(b, MemoryKind::DeviceLocal, 2 * size + 256);
        let op = Op::Copy { len };
        let bindings = [
            range(dev, 0, size),
            range(dev, size + 256 - size % 256, size),
        ];
        let t = b.dispatch(&op, &bindings).unwrap();
        b.wait_timeout(t, None).unwrap();
        b.free_block(dev).unwrap();
    });
}

#[test]
fn bad_bindings_are_rejected() {
    each_front(|b| {
        let align = b.capabilities().binding_align;
        let dev = alloc(b, MemoryKind::DeviceLocal, 4096);
        let up = alloc(b, MemoryKind::Upload, 4096);
        let op = Op::Relu { len: 16 };
        // Wrong size.
        let err = b
            .dispatch(&op, &[range(dev, 0, 64), range(dev, 256, 32)])
            .unwrap_err();
        assert!(matches!(err, Error::BindingSize { .. }), "{err}");
        // Wrong count.
        let err = b.dispatch(&op, &[range(dev, 0, 64)]).unwrap_err();
        assert!(matches!(err, Error::BindingCount { .. }), "{err}");
        // Offset not a multiple of binding_align.
        let err = b
            .dispatch(&op, &[range(dev, 4, 64), range(dev, 1024, 64)])
            .unwrap_err();
        assert!(matches!(err, Error::Misaligned { .. }), "{err}");
        // An output overlapping an input.
        let err = b
            .dispatch(&op, &[range(dev, 0, 64), range(dev, align.min(32), 64)])
            .unwrap_err();
        assert!(
            matches!(err, Error::Overlap { .. } | Error::Misaligned { .. }),
            "{err}"
        );
        // A readback block is never a kernel operand; an upload block is one only on unified
        // memory (zero copy), where kernels bind it in place.
        let down = alloc(b, MemoryKind::Readback, 4096);
        let err = b
            .dispatch(&op, &[range(down, 0, 64), range(dev, 256, 64)])
            .unwrap_err();
        assert!(matches!(err, Error::WrongMemoryKind { .. }), "{err}");
        let on_upload = b.dispatch(&op, &[range(up, 0, 64), range(dev, 256, 64)]);
        if b.capabilities().device_host_visible {
            b.wait_timeout(on_upload.unwrap(), None).unwrap();
        } else {
            assert!(matches!(on_upload, Err(Error::WrongMemoryKind { .. })));
        }
        b.free_block(down).unwrap();
        // Invalid op parameters.
        let err = b
            .dispatch(
                &Op::Relu { len: 0 },
                &[range(dev, 0, 4), range(dev, 256, 4)],
            )
            .unwrap_err();
        assert!(
            matches!(err, Error::Argument(tensormem::ArgumentError::Zero { .. })),
            "{err}"
        );
        b.free_block(dev).unwrap();
        b.free_block(up).unwrap();
    });
}

#[test]
fn lost_device_is_an_error_not_a_panic() {
    let b = backend(false);
    let dev = alloc(&b, MemoryKind::DeviceLocal, 1024);
    b.device().destroy();
    let _ = b.device().poll(wgpu::PollType::Poll);
    assert!(b.is_lost());
    let err = b.fill_zero(range(dev, 0, 1024)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeviceLost {
                backend: "wgpu",
                ..
            }
        ),
        "{err}"
    );
    let err = b
        .alloc_block(&BlockDesc {
            kind: MemoryKind::Upload,
            size: 64,
            label: "after loss",
        })
        .unwrap_err();
    assert!(matches!(err, Error::DeviceLost { .. }), "{err}");
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    // Freeing still works (it only drops handles).
    b.free_block(dev).unwrap();
}

#[test]
fn no_adapter_is_backend_unavailable() {
    let config = tensormem_wgpu::WgpuConfig {
        backends: wgpu::Backends::empty(),
        ..Default::default()
    };
    match tensormem_wgpu::WgpuBackend::new(config) {
        Err(Error::BackendUnavailable {
            backend: "wgpu",
            reason,
        }) => {
            assert!(reason.contains("no adapter"), "{reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
}

/// Regression for issue 46 (finding 3): wgpu reported no budget, so a 1 TiB tensor was cut into
/// 513 segments and allocated until the machine ran out. The backend now reports the configured
/// budget, else the system's memory, and the runtime refuses the tensor before allocating.
#[test]
fn a_tensor_above_the_budget_is_refused_before_allocation() {
    use tensormem::{DType, Runtime, RuntimeConfig};
    let system = tensormem_wgpu::system_memory().expect("/proc/meminfo names MemTotal");
    for (budget, size, limit) in [
        (None, 1u64 << 40, system),
        (Some(1 << 30), 3 << 29, 1 << 30),
    ] {
        let config = tensormem_wgpu::WgpuConfig {
            budget,
            ..tensormem_wgpu::WgpuConfig::default()
        };
        let b = tensormem_wgpu::WgpuBackend::new(config).unwrap();
        assert_eq!(b.capabilities().budget, Some(limit));
        let rt = Runtime::new(std::sync::Arc::new(b), RuntimeConfig::default()).unwrap();
        match rt.alloc(DType::U8, &[size as usize], "huge") {
            Err(Error::TooLarge {
                requested,
                limit: l,
                ..
            }) => assert_eq!((requested, l), (size, limit)),
            other => panic!("{budget:?}: expected TooLarge, got {other:?}"),
        }
        assert_eq!(rt.device_pool().stats().in_use, 0);
    }
}
