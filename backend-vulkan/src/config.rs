//! Public configuration and report types of the Vulkan backend: [`VulkanConfig`] (every knob with
//! its default and consequence), [`CustomKernel`] for kernels outside the standard op set, and
//! [`VulkanStats`].

use std::time::Duration;

use crate::device::TransferQueue;

/// Creation options of a [`VulkanBackend`](crate::VulkanBackend).
#[derive(Clone, Debug)]
pub struct VulkanConfig {
    /// Report `device_host_visible = false` and never map `DeviceLocal` blocks for host access,
    /// even where device memory is host-visible, so uploads and readbacks go through staging
    /// copies as on a discrete GPU. Default `false`.
    pub force_staging: bool,
    /// Enable `VK_LAYER_KHRONOS_validation` with synchronization validation and record every
    /// warning and error (see [`VulkanBackend::validation_messages`](crate::VulkanBackend::validation_messages)). Also enabled by the
    /// environment variable `TENSORMEM_VULKAN_VALIDATION=1`. Costs several times the CPU time
    /// per call. Creation fails with `BackendUnavailable` if the layer is not installed.
    /// Default `false`.
    pub validation: bool,
    /// Use only a physical device whose name contains this text. Default `None` (best device:
    /// discrete, integrated, virtual, then CPU).
    pub device_name: Option<String>,
    /// Where the transfer lane runs: a concurrent lane on the best queue the device offers
    /// ([`TransferQueue::Auto`], the default), on the compute queue
    /// ([`TransferQueue::SameQueue`]), or collapsed onto the compute lane
    /// ([`TransferQueue::Off`]: transfer work then never overlaps kernels).
    pub transfer_queue: TransferQueue,
    /// Blocks of at least this many bytes get their own `VkDeviceMemory`; smaller ones are
    /// sub-allocated by gpu-allocator from 256 MiB (device) / 64 MiB (host) chunks.
    /// Default 32 MiB.
    pub dedicated_threshold: u64,
    /// Flush and invalidate mapped memory even when it is coherent (exercises the non-coherent
    /// path on lavapipe; costs one driver call per mapped access). Default `false`.
    pub force_flush: bool,
    /// **Testing only.** Record no hazard barriers, so tests can prove that synchronization
    /// validation reports the races the barriers prevent. Never set it otherwise: results on a
    /// real GPU become undefined. Default `false`.
    #[doc(hidden)]
    pub skip_barriers_for_testing: bool,
    /// Grow blocks in place with sparse buffers ([`tensormem_contract::Extensions::growable`]) where
    /// the device offers `sparseBinding`, `sparseResidencyBuffer` and a compute queue that binds
    /// sparse memory; `false` leaves the features off, so the pools add blocks as on a device
    /// without them (the fallback, testable on a sparse-capable driver). Default `true`.
    pub sparse_growth: bool,
    /// Longest [`Backend::wait_timeout`](tensormem_contract::Backend::wait_timeout) (a wait that names no limit) before
    /// it fails with `Error::Timeout`. Default 60 s.
    pub wait_timeout: Duration,
}

impl Default for VulkanConfig {
    fn default() -> Self {
        VulkanConfig {
            force_staging: false,
            validation: false,
            device_name: None,
            transfer_queue: TransferQueue::Auto,
            dedicated_threshold: 32 << 20,
            force_flush: false,
            skip_barriers_for_testing: false,
            sparse_growth: true,
            wait_timeout: Duration::from_secs(60),
        }
    }
}

/// A kernel outside the standard op set: WGSL source and its binding ABI.
#[derive(Clone, Debug)]
pub struct CustomKernel<'a> {
    /// Cache key; two kernels with the same key must have the same source and entry point.
    pub key: &'a str,
    /// WGSL source. Bindings live in `@group(0)`.
    pub source: &'a str,
    /// Entry point.
    pub entry: &'a str,
    /// Storage bindings, one per range passed to [`VulkanBackend::dispatch_custom`](crate::VulkanBackend::dispatch_custom), in order.
    pub bindings: &'a [KernelBinding],
    /// `@binding` of the `var<uniform>` block of 16 `u32`s.
    pub params_binding: u32,
    /// The parameter words.
    pub params: [u32; 16],
    /// Workgroup counts.
    pub workgroups: [u32; 3],
}

/// One storage binding of a [`CustomKernel`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KernelBinding {
    /// `@binding` in group 0.
    pub binding: u32,
    /// Whether the kernel writes the buffer (`read_write`), which orders later accesses after it.
    pub write: bool,
}

/// Counters of one backend, for tests and reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct VulkanStats {
    /// Live blocks.
    pub blocks: usize,
    /// Pipeline barriers recorded between dependent commands (not counting end-of-batch host
    /// barriers).
    pub barriers: u64,
    /// WGSL compilations (kernel cache misses).
    pub kernel_compiles: u64,
    /// Command batches submitted and not yet recycled.
    pub batches_in_flight: usize,
    /// Command batches ready for reuse.
    pub batches_free: usize,
    /// `VkDeviceMemory` objects held, each one `vkAllocateMemory`: the allocator's blocks that
    /// blocks and sparse granules are sub-allocated from, and dedicated allocations.
    pub memory_objects: usize,
}
