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
fn pinned_and_managed_kinds_are_host_visible() {
    assert!(!map_memory_kind(MemoryKind::DeviceLocal).host_visible());
    assert!(map_memory_kind(MemoryKind::Upload).host_visible());
    assert!(map_memory_kind(MemoryKind::Readback).host_visible());
    assert_eq!(map_memory_kind(MemoryKind::Managed), Placement::Managed);
    assert!(map_memory_kind(MemoryKind::Managed).host_visible());
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
fn usize_conversion_keeps_the_number() {
    assert_eq!(to_usize(4096, "copy").ok(), Some(4096));
    #[cfg(target_pointer_width = "32")]
    assert!(matches!(
        to_usize(u64::MAX, "copy"),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn the_per_thread_default_stream_cannot_be_adopted() {
    let err = check_adoptable_stream(0x2).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { what, .. } if what.contains("CU_STREAM_PER_THREAD")),
        "{err:?}"
    );
    // The legacy default stream (null, CU_STREAM_LEGACY) is one stream: accepted, as is any
    // created stream's handle.
    for handle in [0x0, 0x1, 0x7f00_dead_b000] {
        assert!(check_adoptable_stream(handle).is_ok(), "{handle:#x}");
    }
}
