//! What a budgeted model is compiled with ([`CompileDesc`]) and what it reports
//! ([`OffloadReport`]).

use std::time::Duration;

use crate::offload::{self, Score};

/// How a budgeted model is compiled ([`Runtime::compile_with`](crate::Runtime::compile_with)).
#[derive(Clone, Debug)]
pub struct CompileDesc {
    /// Device bytes the model may use at most (`None`: no budget, the plain [`Runtime::compile`](crate::Runtime::compile)).
    pub device_budget: Option<u64>,
    /// Offload scores to try (default all four; the lowest predicted stall wins).
    pub scores: Vec<Score>,
    /// Tensors smaller than this never move (default 64 KiB).
    pub min_offload_size: u64,
    /// Ops between a prefetch's issue and its use (default 1).
    pub prefetch_lead: u64,
    /// Run the copies on the backend's transfer lane, beside the kernels, where the backend has
    /// a concurrent one (default `true`); `false` puts them on the compute queue between the
    /// kernels (the executor before lanes, kept to measure what the lane gains).
    pub transfer_lane: bool,
    /// Swap activations back in with one device copy from their `Readback` slot where the
    /// backend allows it ([`crate::Capabilities::host_visible_copies`]) (default `true`); `false`
    /// reads the slot on the host and stages the bytes back in, as on a backend that cannot (kept
    /// to test and measure that path everywhere). Outputs are identical either way.
    pub direct_swap_in: bool,
    /// Let the schedule drop an activation and re-run its producer before the next use where
    /// that is cheaper than a swap ([`crate::offload::recompute`]) (default `true`); `false`
    /// only keeps or swaps (to compare the two on one model).
    pub recompute: bool,
    /// Where the planner's link bandwidth and device rate come from (default
    /// [`Rates::Default`](super::Rates::Default): fixed, so schedules are deterministic).
    pub rates: super::Rates,
}

impl Default for CompileDesc {
    fn default() -> Self {
        CompileDesc {
            device_budget: None,
            scores: Score::ALL.to_vec(),
            min_offload_size: 64 << 10,
            prefetch_lead: 1,
            transfer_lane: true,
            direct_swap_in: true,
            recompute: true,
            rates: super::Rates::Default,
        }
    }
}

/// What a budgeted model reports (part of [`MemoryReport`](crate::runtime::MemoryReport)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OffloadReport {
    /// The budget, in bytes.
    pub budget: u64,
    /// The placed device peak of the schedule (the arena), in bytes.
    pub planned_peak: u64,
    /// The score that won, and every score's outcome.
    pub score: String,
    /// Every score tried.
    pub outcomes: Vec<offload::ScoreOutcome>,
    /// Device memory is host-visible: nothing is copied; tensors kept off the device are bound
    /// in host-visible memory.
    pub unified: bool,
    /// Bytes copied host-to-device over all runs.
    pub bytes_to_device: u64,
    /// Bytes copied device-to-host over all runs.
    pub bytes_to_host: u64,
    /// Bytes produced again by re-running their ops over all runs (recomputed instead of
    /// swapped; [`crate::offload::recompute`]).
    pub bytes_recomputed: u64,
    /// Extra work of those re-runs over all runs: the bytes the re-run ops bound.
    pub recompute_work: u64,
    /// The link bandwidth the planner used, bytes per second ([`CompileDesc::rates`]).
    pub link_bandwidth: f64,
    /// The device rate the planner used, bytes an op binds per second.
    pub device_rate: f64,
    /// The measured stall of the last run: the time the host waited for copy-outs to land, plus
    /// (after [`Model::run`](super::Model::run), where the backend measures it) the time the
    /// compute lane waited for the transfer lane.
    pub last_stall: Duration,
    /// Whether `last_stall` holds the compute lane's device-side waits for the transfer lane
    /// ([`TransferLanes::transfer_stall`](crate::TransferLanes::transfer_stall): measured on
    /// the host, CUDA and Vulkan); `false` where the backend does not measure them (a collapsed lane:
    /// WebGPU, Vulkan with the lane off) or the lane was off, so only host waits count.
    pub lane_waits_measured: bool,
    /// Whether the copies ran on a concurrent transfer lane.
    pub transfer_lane: bool,
    /// Whether swap-ins are device copies from host-visible memory (else through the host; see
    /// [`CompileDesc::direct_swap_in`]).
    pub direct_swap_in: bool,
}
