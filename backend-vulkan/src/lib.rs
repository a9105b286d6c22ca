//! # tensormem-vulkan
//!
//! The tensormem [`Backend`](tensormem::Backend) on Vulkan: [ash] for the API, [gpu-allocator] for device memory,
//! naga for WGSL → SPIR-V. Works on every Vulkan 1.2 device with timeline semaphores, including
//! lavapipe (Mesa's CPU driver), which is what CI runs under the Khronos validation layer.
//!
//! ```no_run
//! use tensormem::{Backend, BlockDesc, BlockRange, MemoryKind};
//! use tensormem_vulkan::{VulkanBackend, VulkanConfig};
//!
//! let gpu = VulkanBackend::new(VulkanConfig::default())?;
//! let up = gpu.alloc_block(&BlockDesc { kind: MemoryKind::Upload, size: 256, label: "up" })?;
//! let dev = gpu.alloc_block(&BlockDesc { kind: MemoryKind::DeviceLocal, size: 256, label: "t" })?;
//! gpu.write_mapped(up, 0, &[7u8; 256])?;
//! let t = gpu.copy(
//!     BlockRange { block: up, offset: 0, size: 256 },
//!     BlockRange { block: dev, offset: 0, size: 256 },
//! )?;
//! gpu.wait_timeout(t, None)?;
//! # Ok::<(), tensormem::Error>(())
//! ```
//!
//! # Design
//!
//! * **A timeline semaphore per lane, batched submissions** (`timeline`): commands go into a
//!   lane's open command buffer and return its ticket; `completed()` is one
//!   `vkGetSemaphoreCounterValue`. Command pools, descriptor pools and parameter buffers are
//!   recycled once their ticket completes.
//! * **Barriers from range tracking** (`barriers`): a command whose byte ranges conflict with
//!   those since the last barrier (a write on either side) records one global memory barrier;
//!   independent commands run without. Every submission ends with a device → host barrier.
//! * **Blocks are storage buffers** that can also be copied: `DeviceLocal` → gpu-allocator
//!   `GpuOnly`, `Upload` → `CpuToGpu`, `Readback` → `GpuToCpu`, dedicated memory at or above
//!   [`VulkanConfig::dedicated_threshold`]. [`VulkanConfig::force_staging`] hides host-visible
//!   device memory, so CI on lavapipe takes the discrete-GPU path.
//! * **A concurrent transfer lane** (`backend::lanes`): transfer work has its own submissions
//!   and timeline semaphore, on a transfer-only queue family, else a second compute queue, else
//!   the compute queue ([`LaneQueue`]); the lanes order each other by semaphore waits, never
//!   host waits. [`TransferQueue::Off`] collapses the lane onto the compute lane.
//! * **Blocks that grow in place** (`sparse`, [`VulkanConfig::sparse_growth`]): a sparse buffer
//!   whose 64 KiB granules are bound one by one, where the device offers sparse binding.
//! * **Kernels** are wgpu's WGSL sources compiled by naga and cached per key.
//! * **Validation** ([`VulkanConfig::validation`] or `TENSORMEM_VULKAN_VALIDATION=1`): the Khronos
//!   layer with synchronization validation, messages in
//!   [`VulkanBackend::validation_messages`].
//!
//! # Limits
//!
//! * Lane overlap is the driver's: full on a copy engine, none on lavapipe.
//! * Barriers are global memory barriers: precise in *when*, full in scope.
//! * Kernel parameters need host-coherent `CpuToGpu` memory (`Error::Unsupported` otherwise).
//! * `from_raw` relies on the application not using the adopted queue concurrently.
//! * Host-visible memory is driver-placed, not NUMA-bound
//!   ([`tensormem::Capabilities::host_placement`] reports `DriverPlaced`).
//!
//! [ash]: https://docs.rs/ash
//! [gpu-allocator]: https://docs.rs/gpu-allocator
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod backend;
mod barriers;
mod blocks;
mod config;
mod conv;
mod device;
mod error;
mod instance;
mod kernels;
mod ops;
mod sparse;
mod timeline;

pub use backend::VulkanBackend;
pub use config::{CustomKernel, KernelBinding, VulkanConfig, VulkanStats};
pub use device::{LaneQueue, RawVulkan, TransferQueue};
pub use instance::ValidationLog;

/// Re-export of the ash version this crate is built on, for [`RawVulkan`].
pub use ash;
