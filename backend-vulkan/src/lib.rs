//! # tensormem-vulkan
//!
//! The tensormem [`Backend`](tensormem_contract::Backend) on Vulkan: [ash] for the API, [gpu-allocator] for
//! device memory, naga for WGSL → SPIR-V. Works on every Vulkan 1.2 device with timeline
//! semaphores, including lavapipe (Mesa's CPU driver, under the Khronos validation layer in CI).
//!
//! ```no_run
//! use tensormem::{Backend, BlockDesc, BlockRange, MemoryKind};
//! let gpu = tensormem_vulkan::VulkanBackend::new(Default::default())?;
//! let up = gpu.alloc_block(&BlockDesc { kind: MemoryKind::Upload, size: 256, label: "up" })?;
//! let dev = gpu.alloc_block(&BlockDesc { kind: MemoryKind::DeviceLocal, size: 256, label: "t" })?;
//! gpu.write_mapped(up, 0, &[7u8; 256])?;
//! let (src, dst) = (BlockRange { block: up, offset: 0, size: 256 }, BlockRange { block: dev, offset: 0, size: 256 });
//! gpu.wait_timeout(gpu.copy(src, dst)?, None)?;
//! # Ok::<(), tensormem::Error>(())
//! ```
//!
//! # Design
//!
//! * **A timeline semaphore per lane** (`timeline`): commands batch into a lane's open command
//!   buffer and return its ticket; `completed()` is one semaphore read; pools and parameter
//!   buffers are recycled once their ticket completes.
//! * **Barriers from range tracking** (`barriers`): one global memory barrier where a command's
//!   byte ranges conflict with those since the last (a write on either side), none otherwise.
//! * **Blocks are storage buffers**: `DeviceLocal` → `GpuOnly`, `Upload` → `CpuToGpu`, `Readback`
//!   → `GpuToCpu`, dedicated at [`VulkanConfig::dedicated_threshold`]; [`VulkanConfig::force_staging`]
//!   hides host-visible device memory (the discrete-GPU path on lavapipe).
//! * **A transfer lane** (`backend::lanes`) on a transfer-only family, else a second compute queue,
//!   else the compute queue ([`LaneQueue`]); lanes order each other by semaphore waits only.
//! * **Blocks that grow in place** (`sparse`, [`VulkanConfig::sparse_growth`]): sparse buffers
//!   bound 64 KiB granule by granule, for the kinds the driver's sparse buffers take (NVIDIA's
//!   take device-local memory only; host-visible pools then use plain blocks).
//! * **Kernels** are core's WGSL compiled by naga, cached per key; **validation** (the Khronos layer
//!   with synchronization checks) by [`VulkanConfig::validation`] or `TENSORMEM_VULKAN_VALIDATION=1`.
//!
//! **Limits.** Lane overlap is the driver's (none on lavapipe); barriers are global in scope;
//! parameters need host-coherent `CpuToGpu` memory; `from_raw` assumes the adopted queue is not
//! used concurrently; host-visible memory is driver-placed, not NUMA-bound.
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
