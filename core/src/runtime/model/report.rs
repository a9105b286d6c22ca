//! `MemoryReport`: what a compiled model costs in memory and what its plan saved. Its fields are
//! filled at compile time and completed with the runtime's live counters when asked, so the type
//! and that assembly live here, apart from compilation and execution.

use std::time::Duration;

use crate::backend::HostPlacement;
use crate::ops::DType;
use crate::pool::AllocationStats;
use crate::runtime::weights::WeightStoreReport;

use super::{Model, OffloadReport};

/// What a compiled model costs in memory, and what its plan saved. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryReport {
    /// Bytes of the weights this model reads (held once in the runtime's store, however many
    /// models read them).
    pub weight_bytes: u64,
    /// `weight_bytes` per element type (f32, f16, i8 ...), in [`DType`] declaration order.
    pub weight_bytes_by_dtype: Vec<(DType, u64)>,
    /// The runtime's weight store as of [`Model::memory_report`]: device bytes held for every
    /// model of the runtime, each weight once.
    pub weight_store: WeightStoreReport,
    /// Bytes of graph inputs and outputs (persistent per model).
    pub io_bytes: u64,
    /// Bytes the weights, inputs and outputs occupy beyond their sizes: each is its own
    /// allocation, rounded up to the backend's binding alignment (256 bytes on CUDA), so a small
    /// model's device need is more than the sum of its tensors. Zero for a budgeted model, whose
    /// plan places every tensor, padding included.
    pub padding_bytes: u64,
    /// Size of the planned activation arena: the plan's peak.
    pub activation_planned_bytes: u64,
    /// Sum of all intermediate sizes: the arena without reuse.
    pub activation_no_reuse_bytes: u64,
    /// Max over time of live intermediate bytes: no plan can do better.
    pub activation_lower_bound_bytes: u64,
    /// Peak of the greedy-by-size baseline plan.
    pub activation_greedy_bytes: u64,
    /// Which planner produced the plan.
    pub plan_algorithm: String,
    /// Intermediate buffers planned.
    pub planned_buffers: usize,
    /// Device-pool blocks allocated since the runtime was created.
    pub device_blocks_allocated: u64,
    /// Staging blocks allocated since the runtime was created.
    pub staging_blocks_allocated: u64,
    /// Bytes moved through the staging belt since the runtime was created (both directions).
    pub staging_bytes_moved: u64,
    /// The device pool's allocation counters, the runtime's as a whole (`None` when
    /// [`PoolConfig::statistics`](crate::PoolConfig::statistics) is off).
    pub device_allocations: Option<AllocationStats>,
    /// Completed runs of this model.
    pub runs: u64,
    /// Wall time of the last [`Model::run`] (enqueue to completion), or of the last
    /// [`Model::enqueue`] alone.
    pub last_run: Duration,
    /// Highest bytes the runtime's device pool has reserved from the backend (measured by the
    /// pool, all models of the runtime together); for a budgeted model, its own pool's.
    pub peak_device_bytes: u64,
    /// Highest bytes the same pool had handed out to live allocations (each rounded to the copy
    /// alignment): `peak_device_bytes` divided by this is what the pool's policy cost at its
    /// peak (fragmentation and growth slack).
    pub peak_device_live_bytes: u64,
    /// Device bytes reserved in the runtime's account as of the report: the runtime's pools, its
    /// staging belt and the arenas of its budgeted models.
    pub runtime_reserved_bytes: u64,
    /// The runtime's device-memory limit, if any.
    pub runtime_limit: Option<u64>,
    /// The offload schedule and its traffic, for a model compiled with a device budget
    /// ([`Runtime::compile_with`](crate::Runtime::compile_with)).
    pub offload: Option<OffloadReport>,
    /// Where the runtime's host memory lives (the staging belt's and host-visible pools' blocks,
    /// all from the one backend): the NUMA node they are bound to, or why none
    /// ([`Capabilities::host_placement`](crate::Capabilities::host_placement)).
    pub host_memory: HostPlacement,
}

impl Model {
    /// The memory report, with the runtime's block and staging counters as of now.
    pub fn memory_report(&self) -> MemoryReport {
        let mut r = self.report.clone();
        let dev = self.rt.device_pool().stats();
        let st = self.rt.staging().stats();
        r.device_blocks_allocated = dev.blocks_allocated;
        r.staging_blocks_allocated = st.blocks_allocated;
        r.staging_bytes_moved = st.uploaded + st.downloaded;
        r.device_allocations = self.rt.allocation_stats();
        (r.peak_device_bytes, r.peak_device_live_bytes) = match &self.offload {
            Some(o) => o.peak_device_bytes(),
            None => (dev.peak_reserved, dev.peak_in_use),
        };
        r.offload = self.offload.as_ref().map(|o| o.report.clone());
        r.runtime_reserved_bytes = self.rt.budget().reserved();
        r.runtime_limit = self.rt.budget().limit();
        r.weight_store = self.rt.weights().report();
        r.host_memory = self.rt.backend().capabilities().host_placement.clone();
        r
    }
}
