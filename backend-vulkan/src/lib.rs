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
//! gpu.wait(t)?;
//! # Ok::<(), tensormem::Error>(())
//! ```
//!
//! # Design choices
//!
//! * **One timeline semaphore, batched submissions** (`timeline`). Copies, fills and dispatches
//!   are recorded into an open command buffer and return its ticket; the batch is submitted on
//!   `flush`/`wait`/`completed`. `completed()` is one `vkGetSemaphoreCounterValue`. Command pools,
//!   descriptor pools and parameter buffers are recycled once their ticket completes.
//! * **Barriers from range tracking** (`barriers`). Each command's accesses (block, byte range,
//!   stage, read/write) are checked against those since the last barrier; a conflict (overlap
//!   with a write on either side) records one global memory barrier covering every device stage.
//!   Independent commands run without barriers; aliased reuse (write-after-read on a range the
//!   planner recycled) always gets one. Every submission ends with a device → host barrier so
//!   mapped reads see device writes. Sync validation checks all of it in CI.
//! * **Blocks are storage buffers** with `TRANSFER_SRC | TRANSFER_DST`, so any block can be bound
//!   or copied. `DeviceLocal` → gpu-allocator `GpuOnly`, `Upload` → `CpuToGpu`, `Readback` →
//!   `GpuToCpu`; requests at or above [`VulkanConfig::dedicated_threshold`] get a dedicated
//!   `VkDeviceMemory`. Non-coherent memory is flushed/invalidated on `nonCoherentAtomSize`
//!   boundaries.
//! * **Forced staging** ([`VulkanConfig::force_staging`]) hides the host visibility of device
//!   memory (lavapipe has one memory type that is device-local *and* host-visible), so the
//!   discrete-GPU path (staging copies) is what CI tests.
//! * **Transfer lane.** When the device has a transfer-only queue family (discrete GPUs' copy
//!   engines), copies touching `Upload`/`Readback` blocks are submitted there; buffers are shared
//!   `CONCURRENT` between the two families (no ownership transfers), and a batch on one lane waits
//!   on the semaphore for the previous ticket when the lanes alternate, keeping the contract's single
//!   in-order timeline. lavapipe has one family; [`TransferQueue::SameQueue`] runs the lane logic
//!   on its single queue so tests cover it.
//! * **Kernels** are the WGSL sources wgpu uses, compiled by naga (validated) and cached per key.
//!   Parameters go in a 64-byte uniform slot per dispatch.
//! * **Validation** ([`VulkanConfig::validation`] or `TENSORMEM_VULKAN_VALIDATION=1`): the Khronos
//!   layer with synchronization validation; every warning and error is recorded and available
//!   from [`VulkanBackend::validation_messages`].
//!
//! # Limits
//!
//! * One logical queue: the transfer lane keeps ordering with semaphore waits, so copies and
//!   kernels do not overlap (the contract is in-order; overlap would need dependency-aware lanes).
//! * Barriers are global memory barriers: precise in *when*, full in scope.
//! * Kernel parameters need host-coherent `CpuToGpu` memory (true on every known driver;
//!   `Error::Unsupported` otherwise).
//! * `from_raw` relies on the application not using the adopted queue concurrently.
//! * Host-visible memory is not NUMA-bound: the driver allocates it (through gpu-allocator) and
//!   places its pages. On a NUMA machine [`tensormem::Backend::host_placement`] reports
//!   `DriverPlaced` with the device's node (`VK_EXT_pci_bus_info` + sysfs); binding would take
//!   importing memory the runtime mapped itself (`VK_EXT_external_memory_host`).
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
mod timeline;

pub use backend::VulkanBackend;
pub use config::{CustomKernel, KernelBinding, VulkanConfig, VulkanStats};
pub use device::{RawVulkan, TransferQueue};
pub use instance::ValidationLog;

/// Re-export of the ash version this crate is built on, for [`RawVulkan`].
pub use ash;
