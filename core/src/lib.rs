//! # tensormem
//!
//! A portable tensor memory runtime for ML inference: arenas carved by fast sub-allocators,
//! staging and host-visible pools recycled by tickets, a liveness-based static planner, and one
//! backend contract that CUDA, Vulkan, WebGPU and the host CPU all implement.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod error;
pub mod graph;
pub mod host;
pub mod ops;
pub mod plan;
pub mod pool;
pub mod runtime;
pub mod suballoc;
pub mod trace;

pub use backend::{Backend, BlockDesc, BlockId, BlockRange, Capabilities, MemoryKind, Ticket};
pub use error::{Error, OomReport, Result};
pub use graph::{Graph, TensorId};
pub use host::{HostBackend, HostConfig};
pub use ops::{DType, Op};
pub use pool::{Allocation, ArenaPool, Handle, PoolConfig, PoolStats, StagingBelt, StagingConfig};
pub use runtime::{MemoryReport, Model, Runtime, RuntimeConfig, Tensor};
pub use trace::{Trace, TraceEvent, Tracer};
