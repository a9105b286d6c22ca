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
//!   and the application's own kernels are ordered without host syncs; the per-thread default
//!   stream is refused, since its one handle names a different stream on every thread.
//! * **Tickets are CUDA events, recorded lazily** (`timeline.rs`). A submission only bumps a
//!   counter; one `cuEventRecord` at the next `flush` / `completed` / `wait` covers every ticket
//!   since the last one (a stream completes in order). Completed events are kept in a ring and
//!   re-recorded, so steady state creates no events. Events use `CU_EVENT_BLOCKING_SYNC`, so
//!   `wait` sleeps in `cuEventSynchronize` (holding no lock) instead of spinning a core, and
//!   `completed` never blocks: the lock held across possibly blocking enqueues is only tried.
//! * **A lost device stays lost** (`health.rs`): the first sticky error (illegal address, launch
//!   failure, unknown, …) is remembered and every later call fails with
//!   [`Error::DeviceLost`], also a wait on a ticket that had completed.
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
//! * **Pinned blocks on the device's NUMA node** (`numa.rs`): on a machine with several nodes,
//!   the node from `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID` (or the PCI address in sysfs); pinned
//!   blocks are then mapped, bound with `mbind` before first touch and registered
//!   (`cuMemHostRegister`), as PyTorch's `pinned_use_cuda_host_register` does, trading
//!   write-combining for locality. [`tensormem::Capabilities::host_placement`] reports the policy in use.
//! * **Small uploads skip the pools' staging**: `write_queued` copies the bytes into a pinned,
//!   write-combined ring owned by the backend (`staging.rs`) and enqueues a truly asynchronous
//!   `cuMemcpyHtoDAsync` from there; each region is reused once its copy's ticket completes, and a
//!   full ring answers `Ok(None)` so the pools stage instead. `queued_write_max` (default 64 KiB,
//!   [`CudaDesc::queued_write_max`]) tells the pools when to prefer it.
//! * **Expandable blocks** through the VMM API (`vmm.rs`, [`CudaBackend::alloc_expandable_block`]):
//!   one reserved address range grown and shrunk in place, PyTorch's expandable segments. They
//!   are the contract's blocks that grow in place ([`tensormem::Extensions::growable`], each
//!   growth mapped as one allocation), so the pools keep one arena on CUDA instead of adding
//!   blocks.
//! * **Kernels in CUDA C** (`kernels.cu`), compiled once per process with NVRTC for the device
//!   (see "CUDA version and NVRTC" below); launch math and argument lists are pure functions
//!   (`launch.rs`) tested against the source's parameter lists without a GPU.
//! * **Errors** (`error.rs`): allocation OOM → [`Error::OutOfMemory`] (the pools' retry path),
//!   sticky errors → [`Error::DeviceLost`], everything else keeps its `CUresult`.
//!
//! ## CUDA version and NVRTC
//!
//! * **The build targets the CUDA 13.0 driver API**: cudarc's `cuda-13000` feature (root
//!   `Cargo.toml`, [`toolchain::BUILD_CUDA`]), matching the GPU machine's R580 driver. cudarc
//!   resolves driver symbols lazily and panics on a missing one, so a driver reporting an older
//!   CUDA (`cuDriverGetVersion`) is refused up front with [`Error::BackendUnavailable`] naming
//!   both versions. `cuda-version-from-build-system` is not used: it needs nvcc at build time.
//! * **How NVRTC is picked**: cudarc dlopens the first of `libnvrtc.so`, `libnvrtc.so.13`,
//!   `libnvrtc.so.12`, … found on the loader path, so `LD_LIBRARY_PATH` decides (the CUDA 13
//!   wheel ships only `libnvrtc.so.13`, which the pin makes a candidate). Its version
//!   (`nvrtcVersion`) and architectures (`nvrtcGetSupportedArchs`) are read at startup;
//!   [`CudaBackend::toolchain`] and [`CudaBackend::kernel_target`] report them.
//! * **What is compiled** (`toolchain::choose_target`): a **cubin** for the device's architecture
//!   (`sm_90` on an H200) whenever NVRTC knows one of the device's major, so the driver loads
//!   machine code without JIT and a newer-minor NVRTC still works; **PTX** only for a device newer
//!   than NVRTC, which needs an NVRTC no newer than the driver.
//! * **When the pair does not match**: NVRTC of a newer CUDA major than the driver, or PTX from an
//!   NVRTC newer than the driver, is [`Error::BackendUnavailable`] with both versions and the fix
//!   (an NVRTC of the driver's version first on `LD_LIBRARY_PATH`, or a newer driver); a module
//!   the driver still refuses (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`, `NO_BINARY_FOR_GPU`, …) gets
//!   the same message instead of an opaque code. A device older than NVRTC's oldest architecture
//!   (Volta with NVRTC 13) is [`Error::Unsupported`].
//!
//! ## Limits / drawbacks
//!
//! * Needs unified addressing (every 64-bit Linux / Windows platform CUDA supports); the backend
//!   refuses to start without it.
//! * Needs a driver supporting CUDA ≥ 13.0 (R580); for an older driver, rebuild with a lower
//!   cudarc `cuda-XXXXX` feature and [`toolchain::BUILD_CUDA`] to match.
//! * Kernels are straightforward (16×16 tiled matmul, one block per row for reductions), written
//!   for correctness and portability, not peak FLOPs: the crate is about memory.
//! * Same-stream reuse of freed memory is safe immediately on CUDA, but the contract has no way to
//!   say so; the pools still wait for the free's ticket.
//! * `join_from` serialises our stream behind the other stream at the join point.
//! * **Managed memory** (`managed.rs`): `MemoryKind::Managed` blocks are `cuMemAllocManaged`
//!   memory advised onto the device, host-visible, prefetched on the stream
//!   ([`tensormem::Managed::prefetch`]); a request larger than `cuMemGetInfo`'s free memory is
//!   refused before the driver is asked, so managed memory is never oversubscribed.
//! * **Direct copies between CUDA backends** (`peer.rs`, [`tensormem::Peer::copy_to_peer`]):
//!   device to device within one context, `cuMemcpyPeerAsync` with peer access between GPUs,
//!   ordered by events against both streams; a device set stages only where neither applies.

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
use tensormem::Error;
use tensormem::{Capabilities, ManagedMemory, Result, Ticket};

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
    /// `core/benches/pool_traces` at 2 MiB, the pool with holes peaks at or below the pool
    /// without on all six traces (peak ÷ live 1.146 / 1.065 / 1.008 / 1.022 / 1.045 / 1.020
    /// on `rand_logu`, `xfmr_eager`, `gpt2s_train`, `llama8b_prefill`, `mobilenet_v2`,
    /// `xfmr_eager_sdpa`, against 1.152 / 1.162 / 1.040 / 1.174 / 1.393 / 1.020), with fewer
    /// physical allocations than cubecl on each, and moves memory 0–288 times per trace. The
    /// driver's cost of a map is not modelled, and nothing of it has run on a GPU yet; `false`
    /// keeps every granule of the arena mapped (the conformance suite's stream-ordered CUDA
    /// target runs that path).
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
    pub id: tensormem::BlockId,
    /// Its memory kind.
    pub kind: tensormem::MemoryKind,
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

/// One CUDA device behind the [`tensormem::Backend`] contract. See the crate doc.
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
    /// [`Error::InvalidArgument`] for the per-thread default stream (`CU_STREAM_PER_THREAD`: one
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
        self.timeline.health().note(bound)
    }
}

/// Whether [`CudaBackend::new`] can get past library loading here (both `libcuda` and
/// `libnvrtc` load). A device may still be missing.
pub fn libraries_present() -> bool {
    probe::driver_present() && probe::nvrtc_present()
}
