//! Integration tests of the Vulkan backend on a real Vulkan driver (lavapipe in CI), each case run
//! on several configurations (zero-copy, forced staging, the transfer lane collapsed onto the
//! compute lane with forced flushes) under the Khronos validation layer with synchronization validation when it is
//! installed. Every test fails on any validation message, including those emitted while the
//! backend is destroyed.
//!
//! When no Vulkan driver is present the tests report themselves skipped on stderr, unless
//! `TENSORMEM_REQUIRE_VULKAN=1` (set in CI), in which case they fail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    reason = "tests fail by panicking"
)]

mod lavapipe {
    pub mod blocks;
    pub mod kernels;
    pub mod lanes;
    pub mod ops;
    pub mod raw;
    pub mod sparse;
    pub mod transfers;
}

use std::sync::Arc;

pub use tensormem::ops::samples::support::{alloc, bytes_f32, f32_bytes, range};
use tensormem::{Backend, BlockId, Error, MemoryKind, Validated};
use tensormem_vulkan::{TransferQueue, ValidationLog, VulkanBackend, VulkanConfig};

/// The configurations every test runs on.
pub fn configs() -> Vec<(&'static str, VulkanConfig)> {
    let validation = VulkanBackend::validation_available();
    if !validation && std::env::var("TENSORMEM_REQUIRE_VALIDATION").is_ok_and(|v| v == "1") {
        panic!("TENSORMEM_REQUIRE_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed");
    }
    let base = VulkanConfig {
        validation,
        ..VulkanConfig::default()
    };
    vec![
        ("zero-copy", base.clone()),
        (
            "staging",
            VulkanConfig {
                force_staging: true,
                ..base.clone()
            },
        ),
        (
            "staging+collapsed+flush",
            VulkanConfig {
                force_staging: true,
                transfer_queue: TransferQueue::Off,
                force_flush: true,
                ..base
            },
        ),
    ]
}

/// Runs `case` on every configuration and checks that validation stayed silent throughout,
/// destruction included.
pub fn on_each(case: impl Fn(&str, &VulkanBackend)) {
    for (name, config) in configs() {
        let Some(backend) = create(name, config) else {
            return;
        };
        let log = backend.validation_log();
        case(name, &backend);
        drop(backend);
        check_log(name, log);
    }
}

/// As [`on_each`], with core's validating front over the backend: misuse is the front's to
/// refuse (the backend assumes validated input).
pub fn on_each_front(case: impl Fn(&str, &Validated)) {
    for (name, config) in configs() {
        let Some(backend) = create(name, config) else {
            return;
        };
        let log = backend.validation_log();
        let front = Validated::new(Arc::new(backend));
        case(name, &front);
        drop(front);
        check_log(name, log);
    }
}

/// The backend of one configuration, or `None` (skipped, with the reason) without Vulkan.
fn create(name: &str, config: VulkanConfig) -> Option<VulkanBackend> {
    match VulkanBackend::new(config) {
        Ok(b) => Some(b),
        Err(Error::BackendUnavailable { reason, .. }) => {
            if std::env::var("TENSORMEM_REQUIRE_VULKAN").is_ok_and(|v| v == "1") {
                panic!("Vulkan required but unavailable: {reason}");
            }
            eprintln!("SKIPPED ({name}): Vulkan unavailable: {reason}");
            None
        }
        Err(e) => panic!("{name}: creating the backend failed: {e}"),
    }
}

/// Fails on any validation message of a backend that is gone.
fn check_log(name: &str, log: Option<Arc<ValidationLog>>) {
    if let Some(log) = log {
        let messages = log.messages();
        assert!(
            messages.is_empty(),
            "{name}: {} validation message(s):\n{}",
            messages.len(),
            messages.join("\n")
        );
    }
}

/// Uploads `data` into `dst` at `offset` the way the pools do: mapped write when the block is
/// host-visible, otherwise through an `Upload` block and a copy.
pub fn upload(b: &dyn Backend, dst: BlockId, offset: u64, data: &[u8]) {
    if b.capabilities().device_host_visible {
        b.write_mapped(dst, offset, data).unwrap();
        return;
    }
    let staging = alloc(b, MemoryKind::Upload, data.len() as u64);
    b.write_mapped(staging, 0, data).unwrap();
    let t = b
        .copy(
            range(staging, 0, data.len() as u64),
            range(dst, offset, data.len() as u64),
        )
        .unwrap();
    b.wait(t).unwrap();
    b.free_block(staging).unwrap();
}

/// Reads `size` bytes of `src` at `offset` back, as `upload` in reverse. Waits for all work.
pub fn download(b: &dyn Backend, src: BlockId, offset: u64, size: u64) -> Vec<u8> {
    let mut out = vec![0u8; size as usize];
    if b.capabilities().device_host_visible {
        let t = b.flush().unwrap();
        b.wait(t).unwrap();
        b.read_mapped(src, offset, &mut out).unwrap();
        return out;
    }
    let staging = alloc(b, MemoryKind::Readback, size);
    let t = b
        .copy(range(src, offset, size), range(staging, 0, size))
        .unwrap();
    b.wait(t).unwrap();
    b.read_mapped(staging, 0, &mut out).unwrap();
    b.free_block(staging).unwrap();
    out
}
