//! # tensormem-wgpu: the tensormem backend on WebGPU (wgpu 30, native and in a browser)
//!
//! [`WgpuBackend`] implements [`tensormem_contract::Backend`]: blocks are `wgpu::Buffer`s, device work is
//! batched into command encoders on the device's one queue, tickets are submission numbers, and
//! the standard ops run as core's WGSL kernels (`tensormem_contract::ops::wgsl`).
//!
//! ```no_run
//! use tensormem::{Backend, BlockDesc, MemoryKind};
//! use tensormem_wgpu::{WgpuBackend, WgpuConfig};
//!
//! let backend = WgpuBackend::new(WgpuConfig::default())?;
//! let block = backend.alloc_block(&BlockDesc { kind: MemoryKind::DeviceLocal, size: 1 << 20, label: "arena" })?;
//! backend.free_block(block)?;
//! # Ok::<(), tensormem::Error>(())
//! ```
//!
//! ## Design
//!
//! * **One buffer per block, usages fixed by kind** (`DeviceLocal`: storage and copies; `Upload`:
//!   `MAP_WRITE | COPY_SRC`; `Readback`: `MAP_READ | COPY_DST`). With `MAPPABLE_PRIMARY_BUFFERS`
//!   (integrated GPUs, lavapipe) device-local buffers map too, unless [`WgpuConfig::force_staging`].
//! * **Batching.** Copies, fills and dispatches share one open encoder; `flush`, `wait` and
//!   `completed` submit it, `on_submitted_work_done` raises the completed ticket; parameters come
//!   from a ring of 64 KiB uniform buffers (`params`).
//! * **Completion never has to block** (`poll`): wakers ride on the `onSubmittedWorkDone` and
//!   `mapAsync` callbacks, the only way to wait in a browser ([`WgpuBackend::new_async`]). Host
//!   access keeps a buffer mapped until the GPU next uses it; `write_queued` is
//!   `queue.write_buffer` up to [`DEFAULT_QUEUED_WRITE_MAX`].
//! * **No panics from wgpu**: lost devices and uncaptured errors become `Error::DeviceLost` and
//!   `Error::Backend`, out-of-memory `Error::OutOfMemory` at its call (error scopes); everything
//!   wgpu would reject is checked first.
//!
//! ## Limits
//!
//! * Host access waits for all in-flight work on the block; host reads of `Upload` and writes of
//!   `Readback` blocks are a device copy and a wait. One bind group per dispatch; an aliasing input
//!   is bound as a copy (WebGPU forbids overlapping writable bindings).
//! * No heap size from wgpu: the budget is `WgpuConfig::budget`, else [`system_memory`]. Bindings
//!   above `max_storage_buffer_binding_size` are `Error::TooLarge` (the front splits ops; larger
//!   tensors are segmented). In a browser errors surface on the next call.

mod backend;
mod blocks;
mod config;
mod conv;
mod device;
mod error;
mod kernels;
mod params;
mod poll;
mod timeline;

use std::sync::{Arc, Mutex};

use tensormem_contract::{Capabilities, Result, TicketWakers};

pub use config::{DEFAULT_QUEUED_WRITE_MAX, FORCE_STAGING_ENV, WgpuConfig};
pub use device::system_memory;

use blocks::BlockTable;
use error::Health;
use kernels::KernelCache;
use params::ParamRing;
use timeline::Timeline;

/// The wgpu backend: one device and its queue. See the crate doc for the design.
#[derive(Debug)]
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    caps: Capabilities,
    config: WgpuConfig,
    health: Arc<Health>,
    state: Mutex<State>,
}

/// Everything mutable, under one lock.
#[derive(Debug)]
struct State {
    blocks: BlockTable,
    timeline: Timeline,
    kernels: KernelCache,
    /// Uniform blocks of the dispatches' kernel parameters.
    params: ParamRing,
}

impl WgpuBackend {
    /// Creates an instance, adapter and device (the adapter's full limits, plus
    /// `MAPPABLE_PRIMARY_BUFFERS` on unified memory unless staging is forced).
    ///
    /// Native only (it blocks on wgpu's adapter and device requests); see
    /// [`WgpuBackend::new_async`].
    ///
    /// # Errors
    /// [`tensormem_contract::Error::BackendUnavailable`] when no adapter is found (no driver; on a
    /// machine without a GPU install `libvulkan1 mesa-vulkan-drivers`) or no device opens.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(config: WgpuConfig) -> Result<Self> {
        pollster::block_on(Self::new_async(config))
    }

    /// [`WgpuBackend::new`] without blocking: the only form in a browser, where the adapter and
    /// device requests are promises.
    ///
    /// # Errors
    /// As [`WgpuBackend::new`]; in a browser without WebGPU (or with it disabled) no adapter is
    /// found.
    pub async fn new_async(config: WgpuConfig) -> Result<Self> {
        let (device, queue) = device::create_async(&config).await?;
        Ok(Self::from_device(device, queue, config))
    }

    /// Adopts an application's device and queue (clones of the handles; the application keeps
    /// using them). Zero-copy is used only if the device was created with
    /// `MAPPABLE_PRIMARY_BUFFERS` on a unified-memory adapter.
    ///
    /// This installs the device-lost callback and the uncaptured-error handler, replacing the
    /// application's: wgpu keeps one of each. Uncaptured errors of the application's own work
    /// are then reported by this backend's next call.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, config: WgpuConfig) -> Self {
        let wakers = Arc::new(Mutex::new(TicketWakers::default()));
        let health = Health::install(&device, Arc::clone(&wakers));
        let caps = device::capabilities(&device, &config);
        let params = ParamRing::new(&device);
        WgpuBackend {
            device,
            queue,
            caps,
            config,
            health,
            state: Mutex::new(State {
                blocks: BlockTable::new(error::BACKEND),
                timeline: Timeline::new(wakers),
                kernels: KernelCache::default(),
                params,
            }),
        }
    }

    /// The device (for applications that also render or compute with it).
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The configuration this backend was created with.
    pub fn config(&self) -> &WgpuConfig {
        &self.config
    }

    /// Number of live blocks.
    pub fn live_blocks(&self) -> usize {
        error::lock(&self.state).blocks.len()
    }

    /// Number of compiled op pipelines (each kernel key compiles once).
    pub fn compiled_pipelines(&self) -> usize {
        error::lock(&self.state).kernels.pipelines()
    }

    /// Number of 64 KiB uniform buffers in the kernel-parameter ring. It grows only while every
    /// slot is used by work not yet completed, so it stays small when work completes.
    pub fn param_ring_buffers(&self) -> usize {
        error::lock(&self.state).params.buffers()
    }

    /// Whether the wgpu device reported itself lost.
    pub fn is_lost(&self) -> bool {
        self.health.is_lost()
    }
}
