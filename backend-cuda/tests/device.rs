//! Backend behaviour on a real device, and clean unavailability without one.
//!
//! Every test first calls [`backend`]: on a machine without CUDA it asserts that construction
//! returned `Error::BackendUnavailable` (never a panic) and the test ends there; with a GPU it
//! runs the checks. `scripts/gpu-check.sh` runs this file on the GPU machine.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

mod device {
    pub mod blocks;
    pub mod holes;
    pub mod kernels;
    pub mod managed;
    pub mod peer;
    pub mod stall;
}

use tensormem::backend::BlockDesc;
use tensormem::ops::samples::support::{alloc, bytes_f32, f32_bytes, range};
use tensormem::{Backend, Error, MemoryKind};
use tensormem_cuda::{CudaBackend, CudaDesc};

/// The backend, or `None` after checking that its absence is reported cleanly.
fn backend_with(desc: &CudaDesc) -> Option<CudaBackend> {
    match CudaBackend::new(desc) {
        Ok(b) => Some(b),
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert!(!reason.is_empty());
            if std::env::var("TENSORMEM_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("TENSORMEM_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            None
        }
        Err(other) => panic!("CUDA present but backend creation failed: {other}"),
    }
}

fn backend() -> Option<CudaBackend> {
    backend_with(&CudaDesc::default())
}

#[test]
fn unavailable_is_an_error_not_a_panic() {
    let result = std::panic::catch_unwind(|| CudaBackend::new(&CudaDesc::default()).err());
    let err = result.expect("CudaBackend::new panicked");
    if !tensormem_cuda::libraries_present() {
        assert!(
            matches!(
                err,
                Some(Error::BackendUnavailable { backend: "cuda", ref reason })
                    if reason.contains("libcuda") || reason.contains("libnvrtc")
            ),
            "{err:?}"
        );
        // Adopting cannot even be attempted without a stream, but probing is safe too.
        assert!(tensormem_cuda::probe::check_libraries().is_err());
    }
}

#[test]
fn capabilities_describe_a_discrete_gpu() {
    let Some(b) = backend() else { return };
    let caps = b.capabilities();
    assert_eq!(caps.backend, "cuda");
    assert!(!caps.device_host_visible);
    assert!(
        caps.budget
            .is_some_and(|v| v > 0 && v <= caps.max_block_size)
    );
    assert_eq!(caps.binding_align, 256);
}

/// Runs in a child process (the sticky error poisons the process's primary context).
fn sticky_error_child() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let b = backend().expect("the parent saw CUDA");
    let dev = alloc(&b, MemoryKind::DeviceLocal, 4096);
    let retired = b.fill_zero(range(dev, 0, 4096)).unwrap();
    b.wait_timeout(retired, None).unwrap();
    // The application's own kernel on the backend's stream writes through a bad pointer.
    let ptx = cudarc::nvrtc::compile_ptx(
        "extern \"C\" __global__ void bad(float* p) { p[threadIdx.x] = 1.0f; }",
    )
    .unwrap();
    let module = b.context().load_module(ptx).unwrap();
    let f = module.load_function("bad").unwrap();
    let bad_ptr: u64 = 0x10;
    let mut launch = b.stream().launch_builder(&f);
    launch.arg(&bad_ptr);
    // SAFETY: deliberately faulting kernel; the fault is the point of the test.
    unsafe { launch.launch(LaunchConfig::for_num_elems(32)) }.unwrap();
    // The backend tracks only its own work: the next ticket it issues covers the kernel. The fault
    // surfaces at that submission or at its wait, as a lost device either way.
    let lost = b
        .fill_zero(range(dev, 0, 4096))
        .and_then(|t| b.wait_timeout(t, None));
    assert!(matches!(lost, Err(Error::DeviceLost { .. })), "{lost:?}");
    // Remembered: a ticket that had completed, a poll, an allocation all fail fast now.
    assert!(matches!(
        b.wait_timeout(retired, None),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        b.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 4096,
            label: "after loss",
        }),
        Err(Error::DeviceLost { .. })
    ));
    drop(b); // teardown still runs (and must not hang or panic)
    println!("sticky child: ok");
}

#[test]
fn a_sticky_error_is_remembered_by_every_later_call() {
    if std::env::var_os("TENSORMEM_STICKY_CHILD").is_some() {
        return sticky_error_child();
    }
    let Some(b) = backend() else { return };
    drop(b);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_sticky_error_is_remembered_by_every_later_call",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TENSORMEM_STICKY_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("sticky child: ok"),
        "{text}"
    );
}

/// Issue 20: pinned blocks live on the node the backend reports. On a NUMA machine the policy and
/// every page's node are read back from the kernel; on one node the backend must say so.
#[cfg(target_os = "linux")]
#[test]
fn pinned_blocks_follow_the_reported_numa_placement() {
    use tensormem::HostPlacement;
    use tensormem::numa::{NumaTopology, kernel};
    let Some(b) = backend() else { return };
    let placement = b.capabilities().host_placement.clone();
    // No node directory (a kernel without NUMA) counts as none: the backend is unbound then too.
    let nodes = NumaTopology::system().map_or(0, |t| t.nodes().len());
    let Some(node) = placement.bound_node() else {
        assert!(
            matches!(&placement, HostPlacement::Unbound { reason } if !reason.is_empty()),
            "{placement:?}"
        );
        if nodes == 1 {
            assert_eq!(placement, HostPlacement::unbound("one NUMA node"));
        }
        return;
    };
    assert!(nodes >= 2, "bound on a one-node machine: {placement:?}");
    for kind in [MemoryKind::Upload, MemoryKind::Readback] {
        let size = 3 << 20;
        let block = alloc(&b, kind, size);
        let ptr = b.device_addr(range(block, 0, size)).unwrap() as usize as *const u8;
        let policy = kernel::range_policy(ptr as usize).unwrap();
        assert_eq!(policy.nodes, vec![node], "{kind:?}");
        let pages: Vec<*const u8> = (0..size as usize)
            .step_by(4096)
            .map(|o| ptr.wrapping_add(o))
            .collect();
        // Registration pinned (faulted in) every page, under the policy.
        let on = kernel::page_nodes(&pages).unwrap();
        assert!(on.iter().all(|n| *n == Ok(node)), "{kind:?}: {on:?}");
        // And the block still works as pinned memory for the device.
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        b.write_mapped(block, 0, &data).unwrap();
        let dev = alloc(&b, MemoryKind::DeviceLocal, size);
        let t = b.copy(range(block, 0, size), range(dev, 0, size)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let back = alloc(&b, MemoryKind::Readback, size);
        let t = b.copy(range(dev, 0, size), range(back, 0, size)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut out = vec![0u8; size as usize];
        b.read_mapped(back, 0, &mut out).unwrap();
        assert_eq!(out, data);
        for id in [block, dev, back] {
            b.free_block(id).unwrap();
        }
    }
}
