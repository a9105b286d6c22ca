//! The wgpu backend exercised through the `Backend` trait on whatever adapter is present
//! (lavapipe in CI), once with zero-copy device memory and once with staging forced.
//!
//! Submodules: `blocks` (alloc/free, mapped access, copies, fills, queued writes), `tickets`
//! (timeline), `ops` (every op against the host reference), `errors` (limits, bad input, lost
//! device).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail by panicking"
)]

#[path = "backend/blocks.rs"]
mod blocks;
#[path = "backend/errors.rs"]
mod errors;
#[path = "backend/ops.rs"]
mod ops;
#[path = "backend/tickets.rs"]
mod tickets;

use std::sync::Arc;

pub use tensormem::ops::samples::support::{alloc, range};
use tensormem::{Backend, BlockRange, MemoryKind, Validated};
use tensormem_wgpu::{WgpuBackend, WgpuConfig};

/// A backend with staging forced or not. Fails the test (with the reason) when no adapter exists.
pub fn backend(force_staging: bool) -> WgpuBackend {
    match WgpuBackend::new(WgpuConfig::staging(force_staging)) {
        Ok(b) => b,
        Err(e) => panic!("no wgpu device (install libvulkan1 mesa-vulkan-drivers): {e}"),
    }
}

/// Runs `f` on a zero-copy backend and on a forced-staging one.
pub fn each_config(f: impl Fn(&WgpuBackend)) {
    for staging in [false, true] {
        let b = backend(staging);
        assert_eq!(b.config().force_staging, staging);
        f(&b);
    }
}

/// Runs `f` on core's validating front over each configuration: misuse is the front's to refuse
/// (the backend assumes validated input).
pub fn each_front(f: impl Fn(&Validated)) {
    for staging in [false, true] {
        f(&Validated::new(Arc::new(backend(staging))));
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Uploads `data` into `dst` through an upload block and a device copy (the staging path).
pub fn upload(b: &WgpuBackend, dst: BlockRange, data: &[u8]) {
    let staging = alloc(b, MemoryKind::Upload, dst.size);
    b.write_mapped(staging, 0, data).unwrap();
    let t = b.copy(range(staging, 0, dst.size), dst).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.free_block(staging).unwrap();
}

/// Reads `src` back through a readback block and a device copy.
pub fn download(b: &WgpuBackend, src: BlockRange) -> Vec<u8> {
    let rb = alloc(b, MemoryKind::Readback, src.size);
    let t = b.copy(src, range(rb, 0, src.size)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; src.size as usize];
    b.read_mapped(rb, 0, &mut out).unwrap();
    b.free_block(rb).unwrap();
    out
}
