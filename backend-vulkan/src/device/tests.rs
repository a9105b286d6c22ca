//! Unit tests of `device` (no device needed).

use super::*;

fn family(flags: vk::QueueFlags, count: u32) -> vk::QueueFamilyProperties {
    vk::QueueFamilyProperties {
        queue_flags: flags,
        queue_count: count,
        ..Default::default()
    }
}

#[test]
fn lavapipe_single_family_has_no_dedicated_transfer_family() {
    let f = [family(
        vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER,
        1,
    )];
    assert_eq!(pick_families(&f), Some((0, None)));
}

#[test]
fn discrete_layout_finds_dedicated_transfer_family() {
    // NVIDIA-like: graphics+compute, transfer-only, compute-only(+transfer).
    let f = [
        family(
            vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER,
            16,
        ),
        family(vk::QueueFlags::TRANSFER | vk::QueueFlags::SPARSE_BINDING, 2),
        family(vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER, 8),
    ];
    assert_eq!(pick_families(&f), Some((0, Some(1))));
}

#[test]
fn no_compute_no_device() {
    let f = [family(vk::QueueFlags::TRANSFER, 1)];
    assert_eq!(pick_families(&f), None);
    let f = [family(vk::QueueFlags::COMPUTE, 0)];
    assert_eq!(pick_families(&f), None);
}

#[test]
fn discrete_preferred_over_cpu() {
    assert!(
        type_rank(vk::PhysicalDeviceType::DISCRETE_GPU) < type_rank(vk::PhysicalDeviceType::CPU)
    );
    assert!(
        type_rank(vk::PhysicalDeviceType::INTEGRATED_GPU) < type_rank(vk::PhysicalDeviceType::CPU)
    );
}

#[test]
fn lane_queue_prefers_copy_engine_then_second_queue_then_same_queue() {
    use LaneQueue::{DedicatedFamily, SameQueue, SecondQueue};
    assert_eq!(
        lane_queue(TransferQueue::Auto, true, 16),
        Some(DedicatedFamily)
    );
    assert_eq!(lane_queue(TransferQueue::Auto, false, 2), Some(SecondQueue));
    // lavapipe: one family with one queue.
    assert_eq!(lane_queue(TransferQueue::Auto, false, 1), Some(SameQueue));
    assert_eq!(
        lane_queue(TransferQueue::SameQueue, true, 16),
        Some(SameQueue)
    );
    assert_eq!(lane_queue(TransferQueue::Off, true, 16), None);
}
