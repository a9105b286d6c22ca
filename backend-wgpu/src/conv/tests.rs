//! Unit tests of the pure conversions.

use super::*;

#[test]
fn usages_per_kind() {
    use wgpu::BufferUsages as U;
    assert_eq!(
        buffer_usages(MemoryKind::DeviceLocal, false),
        U::STORAGE | U::COPY_SRC | U::COPY_DST
    );
    assert!(buffer_usages(MemoryKind::DeviceLocal, true).contains(U::MAP_READ | U::MAP_WRITE));
    assert_eq!(
        buffer_usages(MemoryKind::Upload, false),
        U::MAP_WRITE | U::COPY_SRC
    );
    // Unified memory: kernels bind upload blocks in place (core's offload).
    assert_eq!(
        buffer_usages(MemoryKind::Upload, true),
        U::STORAGE | U::MAP_WRITE | U::COPY_SRC
    );
    assert_eq!(
        buffer_usages(MemoryKind::Readback, false),
        U::MAP_READ | U::COPY_DST
    );
}

#[test]
fn unified_memory_types() {
    assert!(is_unified_memory(wgpu::DeviceType::Cpu));
    assert!(is_unified_memory(wgpu::DeviceType::IntegratedGpu));
    assert!(!is_unified_memory(wgpu::DeviceType::DiscreteGpu));
    assert!(!is_unified_memory(wgpu::DeviceType::Other));
}

#[test]
fn alignment_arithmetic() {
    assert_eq!(align_down(13, 8), 8);
    assert_eq!(align_down(16, 8), 16);
    assert_eq!(align_up(13, 4), Some(16));
    assert_eq!(align_up(16, 4), Some(16));
    assert_eq!(align_up(0, 4), Some(0));
    assert_eq!(align_up(u64::MAX, 4), None);
}

/// `auto` backend selection skips software implementations, so a `Cpu` adapter (lavapipe,
/// llvmpipe, SwiftShader, WARP) must map to `SoftwareGpu`, never to a GPU type.
#[test]
fn device_types_map_to_core() {
    use tensormem_contract::DeviceType as D;
    let cases = [
        (wgpu::DeviceType::DiscreteGpu, D::DiscreteGpu),
        (wgpu::DeviceType::IntegratedGpu, D::IntegratedGpu),
        (wgpu::DeviceType::VirtualGpu, D::VirtualGpu),
        (wgpu::DeviceType::Cpu, D::SoftwareGpu),
        (wgpu::DeviceType::Other, D::Unknown),
    ];
    for (wgpu_type, want) in cases {
        assert_eq!(map_device_type(wgpu_type), want, "{wgpu_type:?}");
    }
}
