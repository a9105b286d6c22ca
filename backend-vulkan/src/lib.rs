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
//! # Design choices
//!
//! * **A timeline semaphore per lane, batched submissions** (`timeline`). Copies, fills and
//!   dispatches are recorded into a lane's open command buffer and return its ticket; the batch
//!   is submitted on `flush`/`wait`/`completed`. `completed()` is one
//!   `vkGetSemaphoreCounterValue`. Command pools, descriptor pools and parameter buffers are
//!   recycled once their ticket completes.
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
//! * **A concurrent transfer lane** (`backend::lanes`): the contract's transfer work has its
//!   own submissions and timeline semaphore, on a queue of a transfer-only family where the
//!   device has one (discrete GPUs' copy engines; buffers are then shared `CONCURRENT` between
//!   the families, with no ownership transfers), else on a second queue of the compute family,
//!   else on the compute queue itself ([`LaneQueue`]): submissions to one queue are not
//!   execution-ordered unless synchronised, so even there the lane is its own stream.
//!   `transfer_after` and `compute_after` are semaphore waits between the two timelines, never
//!   host waits. [`TransferQueue::Off`] collapses the lane onto the compute lane instead.
//! * **Blocks that grow in place** (`sparse`, [`VulkanConfig::sparse_growth`]): where the device
//!   offers sparse binding of buffers with unbound ranges, a reserved block is a sparse buffer
//!   whose 64 KiB granules are bound one by one to memory sub-allocated by gpu-allocator, with
//!   `vkQueueBindSparse` on the compute queue ordered between the lanes' submissions by a timeline
//!   semaphore; elsewhere the pools add blocks.
//! * **Kernels** are the WGSL sources wgpu uses, compiled by naga (validated) and cached per key.
//!   Parameters go in a 64-byte uniform slot per dispatch.
//! * **Validation** ([`VulkanConfig::validation`] or `TENSORMEM_VULKAN_VALIDATION=1`): the Khronos
//!   layer with synchronization validation; every warning and error is recorded and available
//!   from [`VulkanBackend::validation_messages`].
//!
//! # Limits
//!
//! * How much the lanes overlap is the driver's: on a copy engine fully, on one queue as far as
//!   the driver runs submissions concurrently (lavapipe runs them one after another, so there
//!   the lane is correct but gains nothing). The compute lane's own copies (staging) stay on the
//!   compute queue; only transfer-lane work uses the copy engine.
//! * Barriers are global memory barriers: precise in *when*, full in scope.
//! * Kernel parameters need host-coherent `CpuToGpu` memory (true on every known driver;
//!   `Error::Unsupported` otherwise).
//! * `from_raw` relies on the application not using the adopted queue concurrently.
//! * Host-visible memory is not NUMA-bound: the driver allocates it (through gpu-allocator) and
//!   places its pages. On a NUMA machine [`tensormem::Capabilities::host_placement`] reports
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
mod sparse;
mod timeline;

pub use backend::VulkanBackend;
pub use config::{CustomKernel, KernelBinding, VulkanConfig, VulkanStats};
pub use device::{LaneQueue, RawVulkan, TransferQueue};
pub use instance::ValidationLog;

/// Re-export of the ash version this crate is built on, for [`RawVulkan`].
pub use ash;
