#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

use super::*;

#[test]
fn upload_is_write_combined_and_readback_is_cached() {
    assert_eq!(map_memory_kind(MemoryKind::DeviceLocal), Placement::Device);
    assert_eq!(
        map_memory_kind(MemoryKind::Upload),
        Placement::PinnedHost {
            flags: sys::CU_MEMHOSTALLOC_WRITECOMBINED
        }
    );
    assert_eq!(
        map_memory_kind(MemoryKind::Readback),
        Placement::PinnedHost { flags: 0 }
    );
}

#[test]
fn only_pinned_kinds_are_host_visible() {
    assert!(!map_memory_kind(MemoryKind::DeviceLocal).host_visible());
    assert!(map_memory_kind(MemoryKind::Upload).host_visible());
    assert!(map_memory_kind(MemoryKind::Readback).host_visible());
}

#[test]
fn range_check_accepts_exact_fit_and_rejects_overflow() {
    assert!(check_range(0, 16, 16).is_ok());
    assert!(check_range(16, 0, 16).is_ok());
    assert!(matches!(
        check_range(8, 9, 16),
        Err(Error::OutOfBounds {
            offset: 8,
            size: 9,
            limit: 16,
            ..
        })
    ));
    // Regression guard: offset + size must not wrap around u64.
    assert!(matches!(
        check_range(u64::MAX, 2, 16),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn block_size_rules() {
    assert!(matches!(
        check_block_size(0, 100),
        Err(Error::ZeroSize { what: "block" })
    ));
    assert!(check_block_size(100, 100).is_ok());
    assert!(matches!(
        check_block_size(u64::MAX, 100),
        Err(Error::TooLarge {
            requested: u64::MAX,
            limit: 100,
            ..
        })
    ));
}

#[test]
fn usize_conversion_keeps_the_number() {
    assert_eq!(to_usize(4096, "copy").ok(), Some(4096));
    #[cfg(target_pointer_width = "32")]
    assert!(matches!(
        to_usize(u64::MAX, "copy"),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn nvrtc_arch_picks_the_newest_not_above_the_device() {
    assert_eq!(nvrtc_arch(9, 0).ok(), Some("compute_90")); // H100 / H200
    assert_eq!(nvrtc_arch(8, 0).ok(), Some("compute_80")); // A100
    assert_eq!(nvrtc_arch(8, 7).ok(), Some("compute_86")); // Orin: PTX 8.6 runs on 8.7
    assert_eq!(nvrtc_arch(10, 0).ok(), Some("compute_90")); // newer than the pinned NVRTC
    assert_eq!(nvrtc_arch(12, 0).ok(), Some("compute_90"));
    assert_eq!(nvrtc_arch(5, 0).ok(), Some("compute_50"));
    assert!(matches!(nvrtc_arch(3, 5), Err(Error::Unsupported { .. })));
}
