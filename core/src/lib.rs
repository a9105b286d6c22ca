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
//! # Design
//! * **One narrow backend trait** ([`Backend`]): blocks, mapped access, copies, op dispatch,
//!   tickets. Pooling, budgets, staging, statistics and checks live once in core, so every
//!   backend behaves the same and the conformance suite proves it.
//! * **One validating front** ([`Validated`]) before every backend: one rule and one typed error
//!   per misuse; the first fatal error marks the device broken for every later call.
//! * **Tickets, not fences per allocation**: a free while work is in flight is deferred to the
//!   work's ticket (stream-ordered reuse, as RMM and PyTorch). Tensors bound to kernels
//!   ([`Runtime::dispatch`]) record their uses automatically.
//! * **Out-of-band sub-allocation** ([`suballoc`]): allocator metadata lives in host memory, so
//!   device memory is never touched for bookkeeping. Handles are generational: double free and
//!   use after free are errors.
//! * **Static planning** ([`plan`]): a compiled [`Graph`] puts every intermediate in one arena at
//!   planned offsets, so a steady-state inference allocates nothing.
//! * **Tensors larger than a block are segmented in the tensor** ([`Tensor`]), not the pool;
//!   the front cuts each op into parts that bind within one segment. [`RuntimeConfig::limits`]
//!   lowers the limits so tests take these paths with kilobyte tensors.
//! * **Weights belong to the runtime** ([`runtime::WeightStore`]), shared by name and content
//!   hash between models; f16 and int8 weights are dequantised as kernels load them
//!   ([`ops::quant`]).
//! * **Host memory near its device** ([`numa`]), reported as [`Capabilities::host_placement`].
//! * **Tracing off by default** ([`trace`]): one atomic load per operation when off; traces
//!   export to Perfetto JSON and HTML, and [`trace::analyze`] reports wasted memory.
//!
//! `ARCHITECTURE.md` describes the layers and how they fit.
//!
//! # Limits
//! * One logical queue per backend: work executes in submission order.
//! * Host memory the driver allocates (Vulkan, wgpu) cannot be NUMA-bound.
//! * A segmented tensor's op runs in parts along its outermost axis only: an operand every part
//!   reads whole (a matmul weight, an embedding table) must fit one block and one binding
//!   ([`Error::SegmentedOperand`], [`Error::TooLarge`]). A model's planned activation arena is
//!   one block; copies between the stages of a model split across devices take no segmented
//!   tensors.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod align;
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
    DeviceId, DeviceType, Extensions, Growable, HostAccess, HostAccessWait, InPlaceGrowth, Managed,
    ManagedMemory, MemoryKind, Peer, PeerCopy, PeerPath, Residence, Ticket, TicketWait,
    TicketWakers, TransferLane, TransferLanes, TransferTicket, TransferWait, Waiting,
};
pub use devices::{DeviceSet, PlacedModel, Placement};
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
    CompileDesc, Element, MemoryReport, Model, OffloadReport, Rates, Runtime, RuntimeConfig, Tensor,
};
pub use trace::{Trace, TraceEvent, Tracer};
pub use validate::{DeviceLimits, Validated};

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
