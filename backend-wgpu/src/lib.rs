//! # tensormem-wgpu: the tensormem backend on WebGPU (wgpu 30, native and in a browser)
//!
//! [`WgpuBackend`] implements [`tensormem::Backend`]: blocks are `wgpu::Buffer`s, device work is
//! batched into command encoders and submitted on the device's one queue, tickets are
//! submission numbers, and the standard ops run as the WGSL kernels kept in
//! `tensormem::ops::wgsl`. Pooling, staging belts and planning live in core, above this crate.
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
//! ## Design choices
//!
//! * **One buffer per block, with usages fixed by kind.** `DeviceLocal`: `STORAGE | COPY_SRC |
//!   COPY_DST`; `Upload`: `MAP_WRITE | COPY_SRC`; `Readback`: `MAP_READ | COPY_DST` (the only
//!   mappable usages WebGPU allows without extensions). A tensor is a `(buffer, offset, size)`
//!   binding inside a block, which is what WebGPU bind groups take anyway.
//! * **Zero-copy on unified memory.** On an integrated GPU or a CPU device (lavapipe) whose
//!   adapter has `MAPPABLE_PRIMARY_BUFFERS`, device-local buffers also get `MAP_READ |
//!   MAP_WRITE` and `device_host_visible` is reported, so pools skip staging.
//!   [`WgpuConfig::force_staging`] turns this off, which is how CI exercises the discrete-GPU path
//!   on lavapipe. Discrete GPUs never take it: mapped VRAM is slow or scarce.
//! * **Completion never has to block** (`poll`). `poll_ticket` / `poll_host_access` register the
//!   caller's waker with the `onSubmittedWorkDone` / `mapAsync` callbacks, which wake it; in a
//!   browser (`wasm32`, the `webgpu` backend, [`WgpuBackend::new_async`]) that is the only way to
//!   wait, and no `pollster` or blocking `Device::poll` is compiled there.
//! * **Kernel parameters from a pooled ring** (`params`): 64 KiB uniform buffers carved by core's
//!   ring allocator, slots reused once their dispatch's ticket completes, never a buffer per
//!   dispatch.
//! * **Synchronous mapping over async `map_async` (native).** Host access maps the whole buffer and polls
//!   the device until the callback fires; the mapping is kept until the block is next handed to
//!   the GPU (wgpu forbids mapped buffers in submissions), so repeated writes cost one map.
//!   Mapped views need 8-byte-aligned starts; the backend widens the view itself, so
//!   `copy_align` stays 4 (`COPY_BUFFER_ALIGNMENT`).
//! * **Batching, tickets = submission numbers.** Copies, fills and dispatches go into one open
//!   encoder; `flush`, `wait` and `completed` submit it. Each submission registers
//!   `on_submitted_work_done`, which raises the completed ticket, so `completed` is one
//!   non-blocking poll. Tickets are our own counter, independent of the application's
//!   submissions on an adopted device.
//! * **`write_queued` is `queue.write_buffer`.** wgpu executes queued writes before the next
//!   submission's commands, so a dirty batch is submitted before each queued write to keep
//!   program order. `queued_write_max` (default [`DEFAULT_QUEUED_WRITE_MAX`]) comes from the
//!   `transfer` benchmark.
//! * **No panics from wgpu.** The uncaptured-error handler (whose default panics) and the
//!   device-lost callback are replaced: a lost device turns every later call into
//!   `Error::DeviceLost`; an uncaptured error surfaces as `Error::Backend` on the next call.
//!   Buffer creation and pipeline compilation run inside error scopes, so out-of-memory is
//!   `Error::OutOfMemory` (retryable) at the call that caused it. Everything wgpu would reject
//!   (bounds, alignment, usage, same-buffer copies, binding sizes) is checked first.
//!
//! ## Measured (lavapipe, 2 loaded cores; `cargo bench -p tensormem-wgpu --bench transfer`)
//!
//! * Upload + wait at 1 MiB: `write_queued` 0.59 ms, core's belt 0.78 ms, raw mapped staging
//!   0.56 ms, `create_buffer_init` 0.59 ms; at 256 MiB: belt 0.33 s, `write_buffer` 0.92 s,
//!   `create_buffer_init` 1.86 s (host memcpy ceiling 0.09 s). Zero-copy `write_mapped` runs at
//!   memcpy speed. Hence `queued_write_max` = 4 MiB.
//! * 10 000 tensors (256 B .. 64 KiB) allocated and freed: 1.7 µs each from core's arena pool vs
//!   9.4 µs each with one `create_buffer` per tensor.
//!
//! ## Limits and drawbacks
//!
//! * Mapping is per buffer: host access to a block waits until *all* in-flight work on that
//!   block finished, not just work on the accessed range. A staging belt should rotate several
//!   blocks rather than write one block while the GPU copies from another part of it.
//! * Host reads of `Upload` blocks and host writes of `Readback` blocks (which WebGPU cannot
//!   map that way) are emulated with a device copy and a wait: correct, slow, off the hot path.
//! * Each dispatch creates a bind group (its parameters come from the pooled ring); fine for
//!   inference-sized ops, measurable for thousands of tiny dispatches.
//! * An output of a dispatch must not overlap another operand (no in-place ops, as the WGSL ABI
//!   requires). Inputs may alias each other; since WebGPU forbids overlapping writable storage
//!   bindings in one dispatch, an aliasing input is bound as a device copy (one temporary buffer).
//! * In a browser, out-of-memory and validation errors surface on the next call (through the
//!   uncaptured-error handler), not at the call that caused them: error scopes are promises there.
//! * One mutex guards the block table, the open batch and the pipeline cache; natively, blocking
//!   waits for mapping happen under it.
//! * Natively, awaiting a ticket or a mapping polls the device each time the executor polls the
//!   future (wgpu runs callbacks only inside `Device::poll`): a busy wait; prefer the blocking
//!   forms there.
//! * wgpu reports no heap size or memory budget: `budget` is `WgpuConfig::budget` when set, else
//!   the system's memory ([`system_memory`]), exact on CPU and integrated adapters and only an
//!   upper bound on a discrete GPU (configure its real size there).
//! * Host-visible buffers are not NUMA-bound: the driver (or the browser) allocates them, and wgpu
//!   does not name an adapter's PCI device; on a NUMA machine the backend reports `DriverPlaced`.
//! * A binding above `max_storage_buffer_binding_size` (128 MiB on lavapipe and in Chromium) is
//!   `Error::TooLarge` here; the validating front splits ops over larger tensors into parts that
//!   fit (`tensormem::Validated`); a tensor above `max_buffer_size` (256 MiB in Chromium) is held by
//!   the runtime in segments across buffers (`tensormem::Tensor::segments`).

mod backend;
mod blocks;
mod config;
mod conv;
mod device;
mod error;
mod kernels;
mod mapping;
mod params;
mod poll;
mod timeline;

use std::sync::{Arc, Mutex};

use tensormem::{Capabilities, Result, TicketWakers};

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
    /// [`tensormem::Error::BackendUnavailable`] when no adapter is found (no driver; on a
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
