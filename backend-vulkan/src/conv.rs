//! Pure conversions between tensormem's vocabulary and Vulkan's (the `wgpu-hal/src/vulkan/conv.rs`
//! pattern): memory kinds to gpu-allocator locations, access stages to pipeline stage and access
//! flags, and the byte arithmetic of non-coherent flush ranges. No Vulkan calls, so every function
//! is unit-tested without a device.

use ash::vk;
use gpu_allocator::MemoryLocation;
use tensormem_contract::{DeviceType, MemoryKind};

/// The device type Vulkan reports, in core's words (`CPU` is a software implementation such as
/// lavapipe or SwiftShader).
pub(crate) fn map_device_type(t: vk::PhysicalDeviceType) -> DeviceType {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::DiscreteGpu,
        vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::IntegratedGpu,
        vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::VirtualGpu,
        vk::PhysicalDeviceType::CPU => DeviceType::SoftwareGpu,
        _ => DeviceType::Unknown,
    }
}

/// Where gpu-allocator places a block of `kind`.
///
/// `DeviceLocal` and `Managed` → `GpuOnly` (device-local; on lavapipe and integrated GPUs it is
/// also host-visible, which the zero-copy path uses unless staging is forced; `Managed` exists
/// only there), `Upload` → `CpuToGpu`
/// (host-visible, preferably device-local/write-combined), `Readback` → `GpuToCpu` (host-visible,
/// preferably cached).
pub(crate) fn memory_location(kind: MemoryKind) -> MemoryLocation {
    match kind {
        MemoryKind::DeviceLocal | MemoryKind::Managed => MemoryLocation::GpuOnly,
        MemoryKind::Upload => MemoryLocation::CpuToGpu,
        MemoryKind::Readback => MemoryLocation::GpuToCpu,
    }
}

/// Whether a resource whose memory requirements allow `type_bits` can take memory of `kind`:
/// some allowed type has the properties gpu-allocator falls back to for the kind's location
/// (`DEVICE_LOCAL`; `HOST_VISIBLE | HOST_COHERENT` for upload and readback). NVIDIA's sparse
/// buffers allow device-local types only, so host-visible blocks cannot grow in place there.
pub(crate) fn memory_admits(types: &[vk::MemoryType], type_bits: u32, kind: MemoryKind) -> bool {
    let needed = match memory_location(kind) {
        MemoryLocation::GpuOnly => vk::MemoryPropertyFlags::DEVICE_LOCAL,
        _ => vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
    };
    types
        .iter()
        .take(32)
        .enumerate()
        .any(|(i, t)| type_bits & (1 << i) != 0 && t.property_flags.contains(needed))
}

/// The pipeline stage of a device command, as far as hazards are concerned.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Stage {
    /// `vkCmdCopyBuffer`, `vkCmdFillBuffer`.
    Transfer,
    /// `vkCmdDispatch`.
    Compute,
}

/// Pipeline stage flag of `stage`.
pub(crate) fn stage_flags(stage: Stage) -> vk::PipelineStageFlags {
    match stage {
        Stage::Transfer => vk::PipelineStageFlags::TRANSFER,
        Stage::Compute => vk::PipelineStageFlags::COMPUTE_SHADER,
    }
}

/// Access flag of a read (`write == false`) or write at `stage`.
pub(crate) fn access_flags(stage: Stage, write: bool) -> vk::AccessFlags {
    match (stage, write) {
        (Stage::Transfer, false) => vk::AccessFlags::TRANSFER_READ,
        (Stage::Transfer, true) => vk::AccessFlags::TRANSFER_WRITE,
        (Stage::Compute, false) => vk::AccessFlags::SHADER_READ,
        (Stage::Compute, true) => vk::AccessFlags::SHADER_WRITE,
    }
}

pub(crate) use tensormem_plan::align::align_up;

/// The range to pass to `vkFlushMappedMemoryRanges` / `vkInvalidateMappedMemoryRanges` for the
/// host access of `size` bytes at `offset` inside an allocation that starts at `alloc_offset` in
/// its `VkDeviceMemory` and spans `alloc_size` bytes.
///
/// Vulkan requires the offset to be a multiple of `nonCoherentAtomSize` (`atom`) and the size to
/// be a multiple of it or to reach the end of the memory object. The blocks module allocates with
/// `alloc_offset` a multiple of `atom` and `alloc_size` either a multiple of `atom` or reaching
/// the end of its memory object (a dedicated allocation), so widening the range outwards to atom
/// boundaries and clamping at the allocation's end yields a valid range inside the allocation.
/// The result is `(offset, size)` in memory-object bytes.
pub(crate) fn atom_range(
    alloc_offset: u64,
    alloc_size: u64,
    offset: u64,
    size: u64,
    atom: u64,
) -> (u64, u64) {
    debug_assert!(atom.is_power_of_two());
    debug_assert!(alloc_offset.is_multiple_of(atom));
    debug_assert!(offset + size <= alloc_size);
    let start = (alloc_offset + offset) & !(atom - 1);
    let end = (alloc_offset + offset + size).div_ceil(atom) * atom;
    let end = end.min(alloc_offset + alloc_size);
    (start, end - start)
}

#[cfg(test)]
mod tests;
