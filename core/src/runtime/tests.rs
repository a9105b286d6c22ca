//! Runtime misuse regressions of issue 12 (defects 4, 8 and 9) on the host backend. The
//! conformance suite repeats them on every target.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::BlockRange;
use crate::graph::Graph;
use crate::host::{HostBackend, HostConfig};
use crate::ops::Op;

fn runtime(config: HostConfig) -> Runtime {
    let backend = Arc::new(HostBackend::new(config).unwrap());
    Runtime::new(backend, RuntimeConfig::default()).unwrap()
}

/// Regression: `compile` panicked (index out of bounds) on an output id of another
/// graph, and `read_output` on an intermediate returned whatever occupied its arena offset.
#[test]
fn foreign_outputs_and_intermediate_reads_are_errors() {
    let rt = runtime(HostConfig::default());
    let mut other = Graph::new();
    for i in 0..8 {
        other.input(&format!("o{i}"), DType::F32, &[4]);
    }
    let foreign = other.input("far", DType::F32, &[4]);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4]);
    let h = g.op(Op::Relu { len: 4 }, &[x], &[4], "h").unwrap();
    let y = g
        .op(Op::Scale { len: 4, alpha: 2.0 }, &[h], &[4], "y")
        .unwrap();
    g.output(y);
    let mut bad = g.clone();
    bad.output(foreign);
    assert!(matches!(
        rt.compile(&bad),
        Err(Error::ForeignTensor { tensor: 8, .. })
    ));
    let mut m = rt.compile(&g).unwrap();
    m.set_input(x, bytemuck::cast_slice(&[-1.0f32, 1.0, 2.0, -2.0]))
        .unwrap();
    m.run().unwrap();
    assert_eq!(m.read_output::<f32>(y).unwrap(), [0.0, 2.0, 4.0, 0.0]);
    assert!(matches!(
        m.read_output::<f32>(h),
        Err(Error::NotAnOutput { .. })
    ));
    assert!(matches!(
        m.read_output::<f32>(foreign),
        Err(Error::ForeignTensor { .. })
    ));
    assert_eq!(m.read_output::<f32>(x).unwrap(), [-1.0, 1.0, 2.0, -2.0]);
}

/// Regression: a kernel on a tensor's range was not tracked unless the caller called
/// `mark_used`; a freed tensor's range was reused while the kernel was queued and the kernel
/// overwrote the new tensor. Both the typed and the raw-range dispatch are tracked now.
#[test]
fn kernels_on_freed_tensors_never_overwrite_their_successor() {
    for raw in [false, true] {
        let rt = runtime(HostConfig {
            worker_delay: Duration::from_millis(20),
            ..HostConfig::default()
        });
        let x = rt
            .tensor_from(DType::F32, &[64], &[1.0f32; 64], "x")
            .unwrap();
        let y = rt.alloc(DType::F32, &[64], "y").unwrap();
        let op = Op::Scale {
            len: 64,
            alpha: 3.0,
        };
        if raw {
            let pool = rt.device_pool();
            let range = |t: &Tensor| BlockRange {
                size: t.size(),
                ..pool.resolve(t.allocation().handle).unwrap()
            };
            rt.backend().dispatch(&op, &[range(&x), range(&y)]).unwrap();
        } else {
            rt.dispatch(&op, &[&x], &[&y]).unwrap();
        }
        let y_range = rt.device_pool().resolve(y.allocation().handle).unwrap();
        rt.free(y).unwrap();
        // A new tensor of the same size, filled while the kernel may still be queued.
        let z = rt
            .tensor_from(DType::F32, &[64], &[7.0f32; 64], "z")
            .unwrap();
        let z_range = rt.device_pool().resolve(z.allocation().handle).unwrap();
        rt.synchronize().unwrap();
        assert_eq!(
            rt.download::<f32>(&z).unwrap(),
            vec![7.0; 64],
            "raw = {raw}: z at {z_range:?}, freed y at {y_range:?}"
        );
        rt.free(x).unwrap();
        rt.free(z).unwrap();
    }
}

#[test]
fn tensors_bind_to_kernels_with_their_dtype_and_size_checked() {
    let rt = runtime(HostConfig::default());
    let x = rt
        .tensor_from(DType::F32, &[4], &[-1.0f32, 2.0, -3.0, 4.0], "x")
        .unwrap();
    let y = rt.alloc(DType::F32, &[4], "y").unwrap();
    let ids = rt.alloc(DType::U32, &[4], "ids").unwrap();
    let small = rt.alloc(DType::F32, &[3], "small").unwrap();
    let relu = Op::Relu { len: 4 };
    rt.dispatch(&relu, &[&x], &[&y]).unwrap();
    assert_eq!(rt.download::<f32>(&y).unwrap(), [0.0, 2.0, 0.0, 4.0]);
    assert!(matches!(
        rt.dispatch(&relu, &[&ids], &[&y]),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        rt.dispatch(&relu, &[&x], &[&small]),
        Err(Error::BindingSize { .. })
    ));
    assert!(matches!(
        rt.dispatch(&relu, &[&x], &[&x]),
        Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        rt.dispatch(&relu, &[&x, &y], &[&y]),
        Err(Error::BindingCount { .. })
    ));
    for t in [x, y, ids, small] {
        rt.free(t).unwrap();
    }
}

/// Regression: typed transfers checked byte counts only (f64 data went into an f32
/// tensor), and a 2^40-byte request on the host reported a retryable out-of-memory.
#[test]
fn typed_transfers_check_the_dtype_and_huge_requests_are_too_large() {
    let rt = runtime(HostConfig::default());
    let t = rt.alloc(DType::F32, &[4], "f32").unwrap();
    assert!(matches!(
        rt.upload(&t, &[1.0f64, 2.0]),
        Err(Error::DTypeMismatch {
            expected: DType::F32,
            actual: DType::F64,
            ..
        })
    ));
    assert!(matches!(
        rt.download::<i32>(&t),
        Err(Error::DTypeMismatch { .. })
    ));
    // Raw bytes are always allowed.
    rt.upload(&t, &[0u8; 16]).unwrap();
    assert_eq!(rt.download::<u8>(&t).unwrap(), [0u8; 16]);
    rt.free(t).unwrap();
    let limit = rt.backend().capabilities().max_block_size;
    if limit <= 1 << 40 {
        let e = rt.alloc(DType::U8, &[1 << 40], "huge").unwrap_err();
        assert!(
            matches!(e, Error::TooLarge { .. }) && !e.is_retryable(),
            "got {e}"
        );
    }
}

/// After device loss every runtime call fails fast with `DeviceLost`, including allocations
/// that would fit an existing block.
#[test]
fn a_lost_device_refuses_new_work() {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(host.clone(), RuntimeConfig::default()).unwrap();
    let t = rt.tensor_from(DType::F32, &[4], &[1.0f32; 4], "t").unwrap();
    host.simulate_device_loss();
    assert!(matches!(rt.synchronize(), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        rt.alloc(DType::F32, &[4], "after"),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(
        rt.dispatch(&Op::Relu { len: 4 }, &[&t], &[&t]),
        Err(Error::DeviceLost { .. })
    ));
    let _ = rt.free(t);
}

/// Issue 18: the runtime's wait limit applies to every wait it makes (here a download and
/// `synchronize`), fails with a typed, retryable timeout, and loses nothing: the device stays
/// usable and the same download succeeds once the work is done.
#[test]
fn the_runtime_wait_limit_times_out_typed_and_loses_nothing() {
    let backend = Arc::new(
        HostBackend::new(HostConfig {
            worker_delay: Duration::from_millis(300),
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let rt = Runtime::new(
        backend,
        RuntimeConfig {
            wait_timeout: Some(Duration::from_millis(20)),
            ..RuntimeConfig::default()
        },
    )
    .unwrap();
    let x = rt
        .tensor_from(DType::F32, &[16], &[2.5f32; 16], "x")
        .unwrap();
    let y = rt.alloc(DType::F32, &[16], "y").unwrap();
    rt.dispatch(
        &Op::Scale {
            len: 16,
            alpha: 2.0,
        },
        &[&x],
        &[&y],
    )
    .unwrap();
    let e = rt.synchronize().unwrap_err();
    assert!(
        matches!(e, Error::Timeout { backend: "host", timeout, .. } if timeout == Duration::from_millis(20)),
        "{e}"
    );
    assert!(e.is_retryable() && !e.is_fatal());
    assert!(e.to_string().contains("wait_timeout"), "{e}");
    // An explicit limit on the front overrides the runtime's; no limit waits for the work.
    rt.backend()
        .wait_timeout(rt.backend().flush().unwrap(), Some(Duration::MAX))
        .unwrap();
    assert_eq!(rt.download::<f32>(&y).unwrap(), vec![5.0; 16]);
    rt.free(x).unwrap();
    rt.free(y).unwrap();
}
