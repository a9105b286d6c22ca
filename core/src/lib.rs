//! # tensormem
//!
//! A portable tensor memory runtime for ML inference: arenas carved by fast sub-allocators,
//! staging and host-visible pools recycled by tickets, a liveness-based static planner, and one
//! backend contract that CUDA, Vulkan, WebGPU and the host CPU all implement.
//!
//! ```
//! use std::sync::Arc;
//! use tensormem::{DType, Graph, HostBackend, HostConfig, Op, Runtime, RuntimeConfig};
//!
//! # fn main() -> tensormem::Result<()> {
//! let backend = Arc::new(HostBackend::new(HostConfig::default())?);
//! let rt = Runtime::new(backend, RuntimeConfig::default())?;
//!
//! // Tensors: typed upload and download through the pools.
//! let t = rt.tensor_from(DType::F32, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0], "x")?;
//! assert_eq!(rt.download::<f32>(&t)?, vec![1.0, 2.0, 3.0, 4.0]);
//! rt.free(t)?;
//!
//! // Graphs: intermediates share one planned arena.
//! let mut g = Graph::new();
//! let x = g.input("x", DType::F32, &[4]);
//! let h = g.op(Op::Relu { len: 4 }, &[x], &[4], "relu")?;
//! let y = g.op(Op::Scale { len: 4, alpha: 2.0 }, &[h], &[4], "double")?;
//! g.output(y);
//! let mut model = rt.compile(&g)?;
//! model.set_input(x, bytemuck::cast_slice(&[-1.0f32, 0.5, 2.0, -3.0]))?;
//! model.run()?;
//! assert_eq!(model.read_output::<f32>(y)?, vec![0.0, 1.0, 4.0, 0.0]);
//! # Ok(()) }
//! ```
//!
//! # Design choices
//! * **One narrow backend trait** ([`Backend`]): blocks, mapped access, copies, op dispatch, tickets.
//!   Pooling, budgets, staging, statistics and checks live once in core, so every backend behaves
//!   the same and the conformance suite proves it.
//! * **One validating front** ([`Validated`]) in front of every backend: ranges, alignment, exact
//!   binding sizes, overlapping outputs, checked shape arithmetic and device state, one rule and one
//!   typed error each; the first fatal error marks the device broken for every later call.
//! * **Tensors bind to kernels** ([`Runtime::dispatch`]): their uses are recorded automatically, and
//!   raw-range work through [`Runtime::backend`] is tracked by range in the front.
//! * **Tickets, not fences per allocation**: work returns a monotonically increasing ticket; a free
//!   while work is in flight is deferred to its ticket (stream-ordered reuse, as RMM and PyTorch).
//! * **Out-of-band sub-allocation** ([`suballoc`]): TLSF metadata lives in host memory, so device
//!   memory is never touched for bookkeeping and the same code serves arenas, rings and planning.
//! * **Generational handles**: double free and use after free are errors, not undefined behaviour.
//! * **Tensors larger than a block are segmented in the tensor, not the pool** ([`Tensor`]):
//!   WebGPU caps a buffer at 256 MiB by default. Such a tensor is several ordinary pool
//!   allocations cut between outermost slices; transfers go segment by segment and the front cuts
//!   each op into parts that bind within one segment, so pools and planners keep one range per
//!   handle. [`RuntimeConfig::limits`] lowers the block and binding limits, so tests run these
//!   paths with kilobyte tensors on every backend.
//! * **Static planning** ([`plan`]): a compiled [`Graph`] puts every intermediate in one arena at
//!   planned offsets, so a steady-state inference allocates nothing.
//! * **Weights belong to the runtime** ([`runtime::WeightStore`]): a model binds each weight by
//!   name and content hash, so every model compiled on a runtime (one per input shape) shares one
//!   device copy, freed with the last model. Weights of matmul, conv2d and embedding can be f16 or
//!   int8 with per-channel or per-group scales ([`ops::quant`]); every backend dequantises as it
//!   loads, so no full-precision copy exists on the device.
//! * **Host memory near its device** ([`numa`]): on a machine with several NUMA nodes, host memory
//!   the runtime maps itself for a device (the host backend's blocks, CUDA's pinned blocks) is
//!   bound to the device's node before its first touch; every backend reports where its host
//!   memory lives ([`Capabilities::host_placement`]) and the memory report carries it.
//! * **Tracing off by default** ([`trace`]): [`Runtime::set_tracer`] records allocations, frees,
//!   blocks, transfers and every op's tensor uses; off, it costs one atomic load per operation.
//!   Traces export to Chrome/Perfetto JSON and a self-contained HTML timeline, and
//!   [`trace::analyze`] reports wasted memory with the peak bytes each fix saves.
//!
//! # Limits
//! * One logical queue per backend: work executes in submission order; no multi-queue overlap yet.
//! * The host backend copies operands around each op (it is a reference, not a fast CPU runtime).
//! * Host memory the driver allocates (Vulkan, wgpu) cannot be NUMA-bound; it is reported as
//!   placed by the driver.
//! * A tensor larger than the device's largest block is held in segments and an op over it runs as
//!   parts within one segment each, but only along the op's outermost axis: an operand every part
//!   reads whole (a matmul weight, an embedding table) must fit one block and one binding
//!   ([`Error::SegmentedOperand`], [`Error::TooLarge`] otherwise). A model's planned activation
//!   arena is one block; activations larger than a block are held in segments outside it.
//!   Copies between the stages of a model split across devices do not take segmented tensors.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod devices;
pub mod error;
pub mod graph;
pub mod host;
pub mod kv;
pub mod numa;
pub mod offload;
pub mod ops;
pub mod plan;
pub mod pool;
pub mod runtime;
pub mod suballoc;
mod time;
pub mod trace;
pub mod validate;

pub use backend::{
    Backend, BackendAdaptor, BlockDesc, BlockEntry, BlockId, BlockRange, BlockTable, Capabilities,
    DeviceType, Extensions, Growable, HostAccess, HostAccessWait, InPlaceGrowth, Managed,
    ManagedMemory, MemoryKind, Peer, PeerCopy, PeerPath, Residence, Ticket, TicketWait,
    TicketWakers, TransferLane, TransferLanes, TransferTicket, TransferWait, Waiting,
};
pub use devices::{DeviceId, DeviceSet, PlacedModel, Placement};
pub use error::{Error, OomReport, Result};
pub use graph::{Graph, TensorId};
pub use host::{HostBackend, HostConfig};
pub use numa::HostPlacement;
pub use ops::{DType, KvDType, KvLayout, Op, WeightFormat};
pub use pool::{
    Allocation, AllocationStats, ArenaConfig, ArenaPool, Carver, DevicePool, Handle, PoolConfig,
    PoolStats, StagingBelt, StagingConfig,
};
/// The offload executor's lane state, driven directly by the conformance suite's test of the
/// swap-in's order after its copy-out (no public API reaches that order alone).
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub use runtime::model::offloaded::lanes::RunLanes as OffloadLanes;
pub use runtime::{
    CompileDesc, Element, MemoryReport, Model, OffloadReport, Runtime, RuntimeConfig, Tensor,
};
pub use trace::{Trace, TraceEvent, Tracer};
pub use validate::{DeviceLimits, Validated};

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
