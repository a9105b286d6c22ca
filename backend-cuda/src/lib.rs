//! # tensormem-cuda
//!
//! The tensormem backend on CUDA, through cudarc's driver API with **dynamic loading**: it builds
//! with no CUDA toolkit, and on a machine without the NVIDIA driver or NVRTC
//! [`CudaBackend::new`] returns [`Error::BackendUnavailable`] instead of panicking.
//!
//! ```
//! use tensormem::{Backend, Error};
//! use tensormem_cuda::{CudaBackend, CudaDesc};
//!
//! match CudaBackend::new(&CudaDesc::default()) {
//!     Ok(cuda) => println!("running on {}", cuda.capabilities().device_name),
//!     Err(Error::BackendUnavailable { reason, .. }) => println!("no CUDA here: {reason}"),
//!     Err(other) => panic!("CUDA is present but failed: {other}"),
//! }
//! ```
//!
//! ## Design choices
//!
//! * **One stream, one timeline.** Every copy, fill and kernel goes to the backend's stream in
//!   submission order, which is the contract's single logical queue; no barriers are needed.
//!   The stream is created, or adopted from an application ([`CudaBackend::adopt`]) so tensormem
//!   and the application's own kernels are ordered without host syncs.
//! * **Tickets are CUDA events, recorded lazily** (`timeline.rs`). A submission only bumps a
//!   counter; one `cuEventRecord` at the next `flush` / `completed` / `wait` covers every ticket
//!   since the last one (a stream completes in order). Completed events are kept in a ring and
//!   re-recorded, so steady state creates no events. `wait` blocks in `cuEventSynchronize`
//!   without holding the lock.
//! * **Other streams join the timeline** ([`CudaBackend::join_from`]): the application's stream
//!   records an event, ours waits for it, and the wait gets a ticket. Deferring a free to that
//!   ticket is PyTorch's `record_stream` expressed in the contract's own terms.
//! * **Device blocks: `cuMemAlloc` by default, or stream-ordered** `cuMemAllocFromPoolAsync` from
//!   a private memory pool that keeps freed memory ([`DeviceAlloc`]). A private pool rather than
//!   the device's default one, so an adopting application's pool settings are left alone.
//! * **Upload and Readback blocks are pinned host memory** (`cuMemHostAlloc`): write-combined for
//!   uploads, cached for readbacks. `write_mapped` / `read_mapped` are plain memcpys into them, and
//!   `copy` is `cuMemcpyAsync` on unified addresses, the DMA fast path. Device memory is not
//!   host-visible (`device_host_visible = false`), so the pools stage, as on any discrete GPU.
//! * **Small uploads skip staging**: `write_queued` is `cuMemcpyHtoDAsync` from the caller's
//!   pageable buffer, which the driver copies out before returning; `queued_write_max` (default
//!   64 KiB, [`CudaDesc::queued_write_max`]) tells the pools when to prefer it.
//! * **Expandable blocks** through the VMM API (`vmm.rs`, [`CudaBackend::alloc_expandable_block`]):
//!   one reserved address range grown and shrunk in place, PyTorch's expandable segments. The
//!   trait has no resize, so this is an inherent API for now (see the crate's report for the
//!   proposed `Backend::grow_block`).
//! * **Kernels in CUDA C** (`kernels.cu`), compiled once per process with NVRTC for the device's
//!   virtual architecture and JIT-compiled by the driver; launch math and argument lists are pure
//!   functions (`launch.rs`) tested against the source's parameter lists without a GPU.
//! * **Errors** (`error.rs`): allocation OOM → [`Error::OutOfMemory`] (the pools' retry path),
//!   sticky errors → [`Error::DeviceLost`], everything else keeps its `CUresult`.
//!
//! ## Limits / drawbacks
//!
//! * Needs unified addressing (every 64-bit Linux / Windows platform CUDA 12 supports); the
//!   backend refuses to start without it.
//! * The cudarc pin is CUDA 12.4 (`cuda-12040`): the driver must support CUDA ≥ 12.4. A driver
//!   missing a 12.4 symbol makes cudarc panic on first use of that symbol; it cannot be detected
//!   up front.
//! * Kernels are straightforward (16×16 tiled matmul, one block per row for reductions), written
//!   for correctness and portability, not peak FLOPs: the crate is about memory.
//! * Same-stream reuse of freed memory is safe immediately on CUDA, but the contract has no way to
//!   say so; the pools still wait for the free's ticket.
//! * `join_from` serialises our stream behind the other stream at the join point.
//! * Host-visible kinds are only `Upload` and `Readback`; there is no managed-memory path.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod blocks;
mod conv;
mod device;
mod error;
mod expandable;
mod kernels;
mod launch;
pub mod probe;
mod timeline;
mod vmm;

use std::sync::{Arc, Mutex};

pub use cudarc::driver::{CudaContext, CudaStream};
pub use expandable::ExpandableDesc;
#[cfg(doc)]
use tensormem::Error;
use tensormem::{Capabilities, Result, Ticket};

use blocks::BlockTable;
use kernels::Kernels;
use timeline::Timeline;

/// How `DeviceLocal` blocks are allocated.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceAlloc {
    /// `cuMemAlloc` / `cuMemFree`: synchronous, each call costs a driver round trip (tens of µs
    /// to ms for large blocks). Fine for the pools' few large blocks. The default.
    #[default]
    MemAlloc,
    /// `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` on the backend's stream, from a private
    /// memory pool whose release threshold is unlimited: freed blocks stay cached in the pool and
    /// are reused by later allocations in stream order, without a driver round trip. Needs a
    /// device with memory-pool support (`Error::Unsupported` otherwise). Cached memory counts
    /// against `cuMemGetInfo`; [`CudaBackend::trim_device_pool`] returns it.
    StreamOrdered,
}

/// Creation arguments of a [`CudaBackend`].
#[derive(Clone, Debug)]
pub struct CudaDesc {
    /// Device ordinal (`CUDA_VISIBLE_DEVICES` numbering). Default 0.
    pub ordinal: usize,
    /// How `DeviceLocal` blocks are allocated. Default [`DeviceAlloc::MemAlloc`].
    pub device_alloc: DeviceAlloc,
    /// The `queued_write_max` capability in bytes: uploads up to this size go through
    /// `write_queued` (`cuMemcpyHtoDAsync` from pageable memory) instead of a staging block.
    /// Default 64 KiB, where the driver's own pageable staging is cheaper than a belt round trip;
    /// 0 disables the path. To be tuned from `benches/cuda_memory.rs` on the target GPU.
    pub queued_write_max: u64,
}

impl Default for CudaDesc {
    fn default() -> Self {
        CudaDesc {
            ordinal: 0,
            device_alloc: DeviceAlloc::MemAlloc,
            queued_write_max: 64 * 1024,
        }
    }
}

/// One live block, as [`CudaBackend::live_blocks`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// The block.
    pub id: tensormem::BlockId,
    /// Its memory kind.
    pub kind: tensormem::MemoryKind,
    /// Usable size in bytes.
    pub size: u64,
    /// The label given at allocation.
    pub label: String,
}

/// Alignment of binding offsets: what `cuMemAlloc` guarantees, and enough for vector loads.
const BINDING_ALIGN: u64 = 256;

/// One CUDA device behind the [`tensormem::Backend`] contract. See the crate doc.
#[derive(Debug)]
pub struct CudaBackend {
    // Field order is drop order: `Drop for CudaBackend` frees the blocks first, then the pool is
    // destroyed while the kernels' module and the stream still hold the context.
    /// The private stream-ordered pool ([`DeviceAlloc::StreamOrdered`] only).
    pool: Option<device::MemPool>,
    blocks: Mutex<BlockTable>,
    kernels: Kernels,
    timeline: Timeline,
    ctx: Arc<CudaContext>,
    caps: Capabilities,
    device_alloc: DeviceAlloc,
}

impl CudaBackend {
    /// Opens device `desc.ordinal` (its primary context) on a new stream.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when `libcuda` or `libnvrtc` cannot be loaded, no device is
    /// visible, or the driver refuses to initialise (checked before any cudarc call, so this never
    /// panics on a machine without CUDA); [`Error::Unsupported`] for a device older than compute
    /// capability 5.0 or without unified addressing; [`Error::Backend`] when NVRTC fails.
    pub fn new(desc: &CudaDesc) -> Result<Self> {
        probe::check_libraries()?;
        let ctx = CudaContext::new(desc.ordinal)
            .map_err(|e| error::map_init_err("cuInit / cuDevicePrimaryCtxRetain", e))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| error::map_init_err("cuStreamCreate", e))?;
        Self::build(ctx, stream, desc)
    }

    /// Runs on an application's existing stream (and its context): tensormem's work is ordered
    /// with the application's on that stream. `desc.ordinal` is ignored.
    ///
    /// # Errors
    /// As [`CudaBackend::new`] (`libnvrtc` is still needed for the kernels).
    pub fn adopt(stream: Arc<CudaStream>, desc: &CudaDesc) -> Result<Self> {
        probe::check_libraries()?;
        let ctx = Arc::clone(stream.context());
        Self::build(ctx, stream, desc)
    }

    fn build(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, desc: &CudaDesc) -> Result<Self> {
        let info = device::DeviceInfo::query(&ctx)?;
        let arch = conv::nvrtc_arch(info.compute.0, info.compute.1)?;
        let pool = match desc.device_alloc {
            DeviceAlloc::MemAlloc => None,
            DeviceAlloc::StreamOrdered => Some(device::MemPool::create(&ctx)?),
        };
        let kernels = Kernels::load(&ctx, kernels::compile(arch)?)?;
        let caps = Capabilities {
            backend: error::BACKEND,
            device_name: info.name,
            device_type: info.device_type,
            binding_align: BINDING_ALIGN,
            copy_align: 1,
            max_block_size: info.total,
            max_binding_size: (4 * u64::from(u32::MAX)).min(info.total),
            device_host_visible: false,
            queued_write_max: desc.queued_write_max,
            budget: Some(info.free),
        };
        Ok(CudaBackend {
            pool,
            blocks: Mutex::new(BlockTable::new(error::BACKEND)),
            kernels,
            timeline: Timeline::new(stream),
            ctx,
            caps,
            device_alloc: desc.device_alloc,
        })
    }

    /// The CUDA context (shared with an adopting application).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every submission goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.timeline.stream()
    }

    /// How `DeviceLocal` blocks are allocated.
    pub fn device_alloc(&self) -> DeviceAlloc {
        self.device_alloc
    }

    /// Makes the backend's stream wait for the work enqueued on `other` so far and returns the
    /// ticket of that wait: memory `other` used can be freed with its free deferred to this
    /// ticket (PyTorch's `record_stream`).
    ///
    /// # Errors
    /// A mapped driver error.
    pub fn join_from(&self, other: &CudaStream) -> Result<Ticket> {
        self.bind()?;
        self.timeline.join_from(other)
    }

    /// Makes `other` wait for everything submitted to the backend so far (hand results to the
    /// application's stream without a host sync).
    ///
    /// # Errors
    /// A mapped driver error.
    pub fn join_into(&self, other: &CudaStream) -> Result<()> {
        self.bind()?;
        self.timeline.join_into(other)
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| error::map_driver_err("cuCtxSetCurrent", e))
    }
}

/// Whether [`CudaBackend::new`] can get past library loading here (both `libcuda` and
/// `libnvrtc` load). A device may still be missing.
pub fn libraries_present() -> bool {
    probe::driver_present() && probe::nvrtc_present()
}
