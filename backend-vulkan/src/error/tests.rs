//! Unit tests of `error` (no device needed).

use super::*;

#[test]
fn device_lost_maps_to_device_lost() {
    let e = map_vk("vkQueueSubmit", vk::Result::ERROR_DEVICE_LOST, 0);
    assert!(
        matches!(
            e,
            Error::DeviceLost {
                backend: "vulkan",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("vkQueueSubmit"));
}

#[test]
fn device_oom_is_retryable_and_keeps_size() {
    let e = map_vk(
        "vkAllocateMemory",
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        4096,
    );
    assert!(e.is_retryable());
    match e {
        Error::OutOfMemory(r) => assert_eq!(r.requested, 4096),
        other => panic!("wrong variant {other}"),
    }
}

#[test]
fn other_codes_keep_raw_code() {
    let e = map_vk("vkCreateBuffer", vk::Result::ERROR_OUT_OF_HOST_MEMORY, 0);
    match e {
        Error::Backend { code, api, .. } => {
            assert_eq!(code, -1);
            assert_eq!(api, "vkCreateBuffer");
        }
        other => panic!("wrong variant {other}"),
    }
}

#[test]
fn allocator_oom_maps_to_out_of_memory_with_label() {
    let e = map_alloc(
        gpu_allocator::AllocationError::OutOfMemory,
        10,
        "upload",
        "x",
    );
    match e {
        Error::OutOfMemory(r) => {
            assert_eq!(r.requested, 10);
            assert_eq!(r.label.as_deref(), Some("x"));
        }
        other => panic!("wrong variant {other}"),
    }
    let e = map_alloc(
        gpu_allocator::AllocationError::NoCompatibleMemoryTypeFound,
        10,
        "upload",
        "",
    );
    assert!(matches!(e, Error::Backend { code: 0, .. }));
}
