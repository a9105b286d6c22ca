//! Pure conversions between core's vocabulary and wgpu's: memory kinds to buffer usages, adapter
//! types to "unified memory", alignment arithmetic. No device calls here.

use tensormem_contract::{DeviceType, MemoryKind};

/// The adapter type wgpu reports, in core's words (`Cpu` is a software implementation such as
/// lavapipe, llvmpipe, SwiftShader or WARP).
pub(crate) fn map_device_type(t: wgpu::DeviceType) -> DeviceType {
    match t {
        wgpu::DeviceType::DiscreteGpu => DeviceType::DiscreteGpu,
        wgpu::DeviceType::IntegratedGpu => DeviceType::IntegratedGpu,
        wgpu::DeviceType::VirtualGpu => DeviceType::VirtualGpu,
        wgpu::DeviceType::Cpu => DeviceType::SoftwareGpu,
        wgpu::DeviceType::Other => DeviceType::Unknown,
    }
}

/// Usages of a block of `kind`. With `zero_copy`, device-local and managed blocks are also mappable
/// (`MAP_READ | MAP_WRITE`, allowed by `Features::MAPPABLE_PRIMARY_BUFFERS`) and upload blocks are
/// also storage buffers (the front lets kernels bind them where device memory is host-visible).
pub(crate) fn buffer_usages(kind: MemoryKind, zero_copy: bool) -> wgpu::BufferUsages {
    use wgpu::BufferUsages as U;
    match kind {
        MemoryKind::DeviceLocal | MemoryKind::Managed if zero_copy => {
            U::STORAGE | U::COPY_SRC | U::COPY_DST | U::MAP_READ | U::MAP_WRITE
        }
        // Managed blocks exist only with zero copy (the backend refuses them otherwise).
        MemoryKind::DeviceLocal | MemoryKind::Managed => U::STORAGE | U::COPY_SRC | U::COPY_DST,
        // Unified memory: kernels bind upload blocks in place (core's offload keeps tensors there).
        MemoryKind::Upload if zero_copy => U::STORAGE | U::MAP_WRITE | U::COPY_SRC,
        MemoryKind::Upload => U::MAP_WRITE | U::COPY_SRC,
        MemoryKind::Readback => U::MAP_READ | U::COPY_DST,
    }
}

/// Whether an adapter of this type shares one memory between host and device, so mapping a
/// device-local buffer is as fast as a device access (integrated GPUs, CPU devices like lavapipe).
/// Discrete GPUs also advertise `MAPPABLE_PRIMARY_BUFFERS` on Vulkan, but mapped device memory
/// there is slow or tiny (BAR), so they take the staging path.
pub(crate) fn is_unified_memory(device_type: wgpu::DeviceType) -> bool {
    matches!(
        device_type,
        wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu
    )
}

pub(crate) use tensormem_plan::align::{align_down, align_up};

#[cfg(test)]
mod tests;
