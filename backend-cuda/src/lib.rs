//! # tensormem-cuda
//!
//! The tensormem backend on CUDA, through cudarc's driver API with **dynamic loading**: it builds
//! with no CUDA toolkit, and without the NVIDIA driver or NVRTC [`CudaBackend::new`] returns
//! [`Error::BackendUnavailable`] instead of panicking.
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
//! ## Design
//!
//! * **One stream, one timeline**: copies, fills and kernels go to the backend's stream (created,
//!   or adopted by [`CudaBackend::adopt`]) in submission order; tickets are events recorded lazily,
//!   one per flush (`timeline.rs`); other streams join by an event wait ([`CudaBackend::join_from`]).
//! * **A lost device stays lost** (`health.rs`): after the first sticky error every call is
//!   [`Error::DeviceLost`]; allocation OOM is [`Error::OutOfMemory`].
//! * **Memory**: device blocks from `cuMemAlloc` or a stream-ordered pool ([`DeviceAlloc`]); pinned
//!   Upload / Readback blocks on the device's NUMA node (`numa.rs`); expandable blocks map physical
//!   memory into reserved address space (`vmm.rs`); managed blocks never oversubscribe
//!   (`managed.rs`); small uploads go through a pinned ring (`staging.rs`); peer copies go direct
//!   where the contexts allow (`peer.rs`).
//! * **Kernels in CUDA C** (`kernels.cu`), compiled once per process by NVRTC to a cubin for the
//!   device (PTX only for a device newer than NVRTC); launch math is pure and tested on the host.
//! * **Versions** (`toolchain.rs`): the CUDA 13.0 driver API ([`toolchain::BUILD_CUDA`]); an older
//!   driver, or an NVRTC newer than the driver, is [`Error::BackendUnavailable`] naming both.
//!
//! ## Limits
//!
//! Needs unified addressing and a CUDA ≥ 13.0 driver (R580); kernels are written for correctness
//! and portability, not peak FLOPs; the pools wait for a free's ticket before reuse though
//! same-stream reuse would be safe at once.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod blocks;
mod conv;
mod device;
mod error;
mod expandable;
mod health;
mod kernels;
mod lanes;
mod launch;
mod managed;
mod numa;
mod nvrtc;
mod peer;
pub mod probe;
mod staging;
mod stall;
mod timeline;
pub mod toolchain;
mod vmm;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

pub use cudarc::driver::{CudaContext, CudaStream};
pub use expandable::ExpandableDesc;
#[cfg(doc)]
use tensormem_contract::Error;
use tensormem_contract::{Capabilities, ManagedMemory, Result, Ticket};

use blocks::BlockTable;
use kernels::Kernels;
use timeline::{CudaEvents, Timeline};
use toolchain::{CodeTarget, Toolchain};

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
    /// `write_queued` (a copy into the backend's pinned ring, then `cuMemcpyHtoDAsync`) instead of
    /// a pool staging block. Default 64 KiB; the ring holds 16 such writes (at least 1 MiB) in
    /// flight. 0 disables the path and the ring. To be tuned from `benches/cuda_memory.rs` on the
    /// target GPU.
    pub queued_write_max: u64,
    /// Whether copies between this backend and another CUDA backend go direct (device to device
    /// in one context, peer to peer between GPUs with peer access; `peer.rs`). Default `true`;
    /// `false` makes a device set stage through host memory, as with `NCCL_P2P_DISABLE`: for
    /// measuring the staged path against the direct one, or a platform whose peer link is bad.
    pub direct_copies: bool,
    /// Offer holes in the blocks that grow in place (`InPlaceGrowth::holes`): the pool gives
    /// back the memory of free holes in its arena and moves it (`cuMemUnmap` + `cuMemMap`)
    /// where tensors need it, in whole physical allocations (`InPlaceGrowth::whole_units`: each
    /// growth or commit is one `cuMemCreate`). Default `true`: in the counting model of
    /// `core/benches/pool_traces` at 2 MiB the pool with holes peaks at or below the pool
    /// without on every trace, with fewer physical allocations than cubecl
    /// (`docs/performance.md`, "Arena with holes"). The driver's cost of a map is not
    /// modelled, and nothing of it has run on a GPU yet; `false` keeps every granule of the
    /// arena mapped (the conformance suite's stream-ordered CUDA target runs that path).
    pub vmm_holes: bool,
}

impl Default for CudaDesc {
    fn default() -> Self {
        CudaDesc {
            ordinal: 0,
            device_alloc: DeviceAlloc::MemAlloc,
            queued_write_max: 64 * 1024,
            direct_copies: true,
            vmm_holes: true,
        }
    }
}

/// One live block, as [`CudaBackend::live_blocks`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// The block.
    pub id: tensormem_contract::BlockId,
    /// Its memory kind.
    pub kind: tensormem_contract::MemoryKind,
    /// Usable size in bytes.
    pub size: u64,
    /// The label given at allocation.
    pub label: String,
}

/// The `write_queued` ring holds this many writes of `queued_write_max` bytes in flight.
const QUEUED_RING_WRITES: u64 = 16;
/// Smallest `write_queued` ring, in bytes.
const MIN_QUEUED_RING: u64 = 1 << 20;

/// Alignment of binding offsets: what `cuMemAlloc` guarantees, and enough for vector loads.
const BINDING_ALIGN: u64 = 256;

/// One CUDA device behind the [`tensormem_contract::Backend`] contract. See the crate doc.
#[derive(Debug)]
pub struct CudaBackend {
    // Field order is drop order: `Drop for CudaBackend` frees the blocks first, then the pool is
    // destroyed while the kernels' module and the stream still hold the context.
    /// The private stream-ordered pool ([`DeviceAlloc::StreamOrdered`] only).
    pool: Option<device::MemPool>,
    blocks: Mutex<BlockTable>,
    /// The pinned ring of `write_queued` (none when `queued_write_max` is 0).
    uploads: Option<device::QueuedUploads>,
    kernels: Kernels,
    timeline: Timeline<CudaEvents>,
    /// The transfer lane: copies and fills on a second, non-blocking stream (`lanes.rs`).
    transfer: Timeline<CudaEvents>,
    /// The compute stream's timed waits for the copy stream (`stall.rs`).
    stall: stall::StallTimer,
    /// Allocations from the stream-ordered pool so far, and how many of them the copy stream is
    /// ordered after (`lanes.rs`).
    stream_allocs: AtomicU64,
    transfer_sees_allocs: AtomicU64,
    ctx: Arc<CudaContext>,
    caps: Capabilities,
    /// Managed memory on this device (`managed.rs`).
    managed: ManagedMemory,
    /// Routes found from other backends' contexts to this one (`peer.rs`).
    peers: peer::PeerLinks,
    /// [`CudaDesc::direct_copies`].
    direct_copies: bool,
    /// [`CudaDesc::vmm_holes`].
    vmm_holes: bool,
    device_alloc: DeviceAlloc,
    tools: Toolchain,
    target: CodeTarget,
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
    /// [`Error::Unsupported`] for the per-thread default stream (`CU_STREAM_PER_THREAD`: one
    /// handle naming a different stream on every thread, so tickets issued from several threads
    /// would not follow one stream order); otherwise as [`CudaBackend::new`] (`libnvrtc` is
    /// still needed for the kernels).
    pub fn adopt(stream: Arc<CudaStream>, desc: &CudaDesc) -> Result<Self> {
        conv::check_adoptable_stream(stream.cu_stream() as usize)?;
        probe::check_libraries()?;
        let ctx = Arc::clone(stream.context());
        Self::build(ctx, stream, desc)
    }

    fn build(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, desc: &CudaDesc) -> Result<Self> {
        let info = device::DeviceInfo::query(&ctx)?;
        let tools = Toolchain {
            driver: probe::driver_version()?,
            nvrtc: nvrtc::version()?,
        };
        toolchain::check_nvrtc(tools.nvrtc)?;
        let target = toolchain::choose_target(tools, &nvrtc::supported_archs()?, info.compute)?;
        let pool = match desc.device_alloc {
            DeviceAlloc::MemAlloc => None,
            DeviceAlloc::StreamOrdered => Some(device::MemPool::create(&ctx)?),
        };
        let kernels = Kernels::load(&ctx, target, tools)?;
        let copy_stream = ctx
            .new_stream()
            .map_err(|e| error::map_init_err("cuStreamCreate (copy stream)", e))?;
        let host_placement = numa::host_placement(&ctx);
        let managed = managed::query_support(&ctx)?;
        let uploads = match desc.queued_write_max {
            0 => None,
            max => Some(device::QueuedUploads::new(
                max.saturating_mul(QUEUED_RING_WRITES).max(MIN_QUEUED_RING),
                host_placement.bound_node(),
            )?),
        };
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
            // `Upload` and `Readback` blocks are pinned host memory in the unified address
            // space: `cuMemcpyAsync` copies between it and device memory in either direction.
            host_visible_copies: true,
            // Where pinned blocks live: bound to the device's NUMA node, or unbound and why
            // (`numa.rs`).
            host_placement,
        };
        Ok(CudaBackend {
            pool,
            blocks: Mutex::new(BlockTable::new(error::BACKEND)),
            uploads,
            kernels,
            timeline: Timeline::new(CudaEvents::new(stream)),
            transfer: Timeline::new(CudaEvents::new(copy_stream)),
            stall: stall::StallTimer::default(),
            stream_allocs: AtomicU64::new(0),
            transfer_sees_allocs: AtomicU64::new(0),
            ctx,
            caps,
            managed,
            peers: peer::PeerLinks::default(),
            direct_copies: desc.direct_copies,
            vmm_holes: desc.vmm_holes,
            device_alloc: desc.device_alloc,
            tools,
            target,
        })
    }

    /// The driver's and NVRTC's CUDA versions this backend runs with.
    pub fn toolchain(&self) -> Toolchain {
        self.tools
    }

    /// What the kernels were compiled to (a cubin for the device, or PTX for the driver's JIT).
    pub fn kernel_target(&self) -> CodeTarget {
        self.target
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

    /// Makes the context current on this thread; fails fast once the device was lost.
    fn bind(&self) -> Result<()> {
        self.timeline.health().check()?;
        let bound = self
            .ctx
            .bind_to_thread()
            .map_err(|e| error::map_driver_err("cuCtxSetCurrent", e));
        self.timeline.health().remember_loss(bound)
    }
}

/// Whether [`CudaBackend::new`] can get past library loading here (both `libcuda` and
/// `libnvrtc` load). A device may still be missing.
pub fn libraries_present() -> bool {
    probe::driver_present() && probe::nvrtc_present()
}
