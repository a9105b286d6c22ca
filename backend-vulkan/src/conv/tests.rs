//! Unit tests of `conv` (no device needed).

use super::*;

#[test]
fn kinds_map_to_locations() {
    assert_eq!(
        memory_location(MemoryKind::DeviceLocal),
        MemoryLocation::GpuOnly
    );
    assert_eq!(
        memory_location(MemoryKind::Upload),
        MemoryLocation::CpuToGpu
    );
    assert_eq!(
        memory_location(MemoryKind::Readback),
        MemoryLocation::GpuToCpu
    );
}

#[test]
fn access_flags_by_stage() {
    assert_eq!(
        access_flags(Stage::Transfer, true),
        vk::AccessFlags::TRANSFER_WRITE
    );
    assert_eq!(
        access_flags(Stage::Compute, false),
        vk::AccessFlags::SHADER_READ
    );
    assert_eq!(
        stage_flags(Stage::Compute),
        vk::PipelineStageFlags::COMPUTE_SHADER
    );
}

#[test]
fn align_up_rounds_and_detects_overflow() {
    assert_eq!(align_up(0, 64), Some(0));
    assert_eq!(align_up(1, 64), Some(64));
    assert_eq!(align_up(64, 64), Some(64));
    assert_eq!(align_up(u64::MAX, 64), None);
}

#[test]
fn atom_range_widens_to_atom_boundaries() {
    // Allocation at 128 of 256 bytes, atom 64: access [10, 20) → memory [128, 192).
    assert_eq!(atom_range(128, 256, 10, 10, 64), (128, 64));
    // Access straddling an atom boundary: [60, 70) → [128, 256).
    assert_eq!(atom_range(128, 256, 60, 10, 64), (128, 128));
    // Access up to the end stays inside the allocation.
    assert_eq!(atom_range(128, 256, 200, 56, 64), (128 + 192, 64));
    // Already aligned access is unchanged.
    assert_eq!(atom_range(0, 4096, 64, 128, 64), (64, 128));
    // Atom 1 (coherent-like) is exact.
    assert_eq!(atom_range(3, 17, 5, 7, 1), (8, 7));
}

#[test]
fn atom_range_exhaustive_small() {
    // Every access inside a 4-atom allocation maps to an aligned range that covers it and stays
    // inside the allocation.
    let atom = 16;
    let (ao, asz) = (32u64, 64u64);
    for off in 0..asz {
        for size in 1..=(asz - off) {
            let (s, n) = atom_range(ao, asz, off, size, atom);
            assert_eq!(s % atom, 0);
            assert!(n % atom == 0 || s + n == ao + asz);
            assert!(s <= ao + off && ao + off + size <= s + n);
            assert!(s >= ao && s + n <= ao + asz);
        }
    }
}

/// `auto` backend selection skips software implementations, so lavapipe (`CPU`) must map to
/// `SoftwareGpu`, never to a GPU type.
#[test]
fn device_types_map_to_core() {
    use tensormem_contract::DeviceType as D;
    let cases = [
        (vk::PhysicalDeviceType::DISCRETE_GPU, D::DiscreteGpu),
        (vk::PhysicalDeviceType::INTEGRATED_GPU, D::IntegratedGpu),
        (vk::PhysicalDeviceType::VIRTUAL_GPU, D::VirtualGpu),
        (vk::PhysicalDeviceType::CPU, D::SoftwareGpu),
        (vk::PhysicalDeviceType::OTHER, D::Unknown),
    ];
    for (vk_type, want) in cases {
        assert_eq!(map_device_type(vk_type), want, "{vk_type:?}");
    }
}

/// The memory types of an NVIDIA discrete GPU (the H200's driver 580 lists these kinds).
fn nvidia_types() -> Vec<vk::MemoryType> {
    use vk::MemoryPropertyFlags as F;
    [
        F::empty(),
        F::DEVICE_LOCAL,
        F::HOST_VISIBLE | F::HOST_COHERENT,
        F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
        F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
    ]
    .into_iter()
    .map(|property_flags| vk::MemoryType {
        property_flags,
        heap_index: 0,
    })
    .collect()
}

#[test]
fn memory_admits_follows_the_allowed_types() {
    let types = nvidia_types();
    // A plain buffer allows every type.
    for kind in [
        MemoryKind::DeviceLocal,
        MemoryKind::Upload,
        MemoryKind::Readback,
    ] {
        assert!(memory_admits(&types, 0b11111, kind), "{kind:?}");
    }
    // A sparse buffer there allows the device-local type alone.
    assert!(memory_admits(&types, 0b00010, MemoryKind::DeviceLocal));
    assert!(!memory_admits(&types, 0b00010, MemoryKind::Upload));
    assert!(!memory_admits(&types, 0b00010, MemoryKind::Readback));
    // Device-local and host-visible (resizable BAR) serves every kind.
    assert!(memory_admits(&types, 0b10000, MemoryKind::Readback));
    assert!(!memory_admits(&types, 0, MemoryKind::DeviceLocal));
}
