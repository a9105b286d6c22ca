//! What a device can do and what it is: read once when a backend is created, constant for its
//! lifetime, and lowered by the validating front's [`DeviceLimits`](crate::DeviceLimits).

#[cfg(doc)]
use super::Backend;
use super::HostPlacement;

/// What kind of processor runs a backend's work, as the driver reports it. Applications that pick
/// a backend for speed use it: a software implementation of a GPU API runs the same kernels far
/// slower than the host backend's native CPU code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceType {
    /// A GPU with its own memory (Vulkan `DISCRETE_GPU`, wgpu `DiscreteGpu`, CUDA devices that
    /// are not integrated).
    DiscreteGpu,
    /// A GPU sharing the host's memory (Vulkan `INTEGRATED_GPU`, wgpu `IntegratedGpu`, CUDA's
    /// `CU_DEVICE_ATTRIBUTE_INTEGRATED`).
    IntegratedGpu,
    /// A GPU exposed through virtualisation (Vulkan `VIRTUAL_GPU`, wgpu `VirtualGpu`).
    VirtualGpu,
    /// A GPU API implemented in software on the CPU: lavapipe and llvmpipe (Mesa), SwiftShader,
    /// WARP (Vulkan `CPU`, wgpu `Cpu`).
    SoftwareGpu,
    /// The host backend's native CPU kernels.
    HostCpu,
    /// The driver did not say (Vulkan `OTHER`, wgpu `Other`).
    Unknown,
}

impl DeviceType {
    /// A short lower-case name for reports ("discrete GPU", "software GPU", ...).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::DiscreteGpu => "discrete GPU",
            DeviceType::IntegratedGpu => "integrated GPU",
            DeviceType::VirtualGpu => "virtual GPU",
            DeviceType::SoftwareGpu => "software GPU",
            DeviceType::HostCpu => "host CPU",
            DeviceType::Unknown => "unknown device type",
        }
    }
}

/// What a device can do, read once when the backend is created.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// Backend name: "host", "wgpu", "vulkan", "cuda".
    pub backend: &'static str,
    /// The device's name as the driver reports it.
    pub device_name: String,
    /// The kind of processor the device is, as the driver reports it.
    pub device_type: DeviceType,
    /// Alignment in bytes of binding offsets in `dispatch` (WebGPU's
    /// `min_storage_buffer_offset_alignment`, Vulkan's `minStorageBufferOffsetAlignment`).
    pub binding_align: u64,
    /// Alignment in bytes of offsets and sizes of copies, fills and mapped access (wgpu: 4;
    /// Vulkan: 4 for fills; 1 where the API has no rule).
    pub copy_align: u64,
    /// Largest block in bytes.
    pub max_block_size: u64,
    /// Largest range one kernel binding may cover, in bytes.
    pub max_binding_size: u64,
    /// Whether `DeviceLocal` blocks are host-visible (integrated GPUs, lavapipe, the host backend):
    /// the zero-copy path. Backends report `false` when configured to force staging copies.
    pub device_host_visible: bool,
    /// Largest upload, in bytes, for which the pools prefer [`Backend::write_queued`] over their
    /// own staging belt (0: never). A backend sets it from measurement: wgpu's
    /// `queue.write_buffer` beats a mapped belt for small writes.
    pub queued_write_max: u64,
    /// Bytes of device memory this process may use, when the API reports it (`cuMemGetInfo`,
    /// `VK_EXT_memory_budget`, heap size).
    pub budget: Option<u64>,
    /// Whether copies (on either lane) may also read `Readback` blocks and write `Upload` blocks,
    /// so that bytes parked in host-visible memory go back to the device, or out to it, with one
    /// device copy instead of a round trip through host code: pinned memory on CUDA, host-visible
    /// buffers with both transfer usages on Vulkan, and the host backend can. `false` keeps the
    /// staging directions only (copies read `Upload` and write `Readback`): WebGPU cannot, since
    /// a `MAP_READ` buffer may not be a copy source without mappable-primary-buffers. The
    /// validating front enforces whichever rule applies.
    pub host_visible_copies: bool,
    /// Where the backend's host memory (upload, readback and host-visible blocks) lives: bound to
    /// the NUMA node closest to the device, placed by the driver, or unbound, with the reason
    /// (`tensormem::numa` explains the policy and its fallbacks; the default is unbound, not
    /// reported).
    pub host_placement: HostPlacement,
}
