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
//! One narrow [`Backend`] trait behind one validating front ([`Validated`]); pools, budgets,
//! staging, statistics and checks live once in core, as adaptors over [`DevicePool`]. Frees wait
//! for tickets, not fences; allocator metadata lives on the host ([`suballoc`]) with
//! generational handles; a compiled [`Graph`] places its intermediates by a static plan
//! ([`plan`]); tensors larger than a block are segmented in the [`Tensor`]; weights belong to the
//! runtime ([`runtime::WeightStore`]); tracing costs one atomic load when off ([`trace`]).
//! `ARCHITECTURE.md` describes every layer. Limits: one logical queue per backend; a segmented
//! tensor's op runs in parts along its outermost axis only ([`Error::SegmentedOperand`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod devices;
pub mod graph;
pub mod kv;
pub mod ops;
pub mod pool;
pub mod runtime;
#[cfg(test)]
mod test_adaptors;
pub mod trace;
pub mod validate;

// The backend contract and the error type, at the paths they have always had.
use tensormem_contract::time;
pub use tensormem_contract::{backend, error};
// The host backend, a backend crate of its own.
pub use tensormem_host as host;
pub use tensormem_host::numa;

// The pure planners and sub-allocators, at the paths they have always had.
pub use tensormem_plan::{align, offload, plan, suballoc};

pub use backend::HostPlacement;
pub use backend::{
    Backend, BackendAdaptor, BlockDesc, BlockEntry, BlockId, BlockRange, BlockTable, Capabilities,
    DeviceId, DeviceType, Extensions, Growable, HostAccess, HostAccessWait, InPlaceGrowth, Managed,
    ManagedMemory, MappedAccess, MemoryKind, Peer, PeerCopy, PeerPath, PeerRanges, Residence,
    Ticket, TicketWait, TicketWakers, TransferLane, TransferLanes, TransferTicket, TransferWait,
    Waiting,
};
pub use devices::{DeviceSet, PlacedModel, Placement};
pub use error::{ArgumentError, Error, GraphError, GrowthError, OomReport, Result};
pub use graph::{Graph, TensorId};
pub use host::{HostBackend, HostConfig};
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
