//! Budgeted compilation: a [`Model`] whose device memory stays within a budget by following an
//! [`OffloadSchedule`](crate::offload::OffloadSchedule).
//!
//! Every tensor's device residencies (weights, inputs and outputs included, not only the
//! intermediates) are placed in one arena of the schedule's peak, allocated from a device pool the
//! model owns. That pool reserves against a [sub-account](crate::pool::Budget::sub_account) of the
//! runtime's budget whose limit is the model's budget: the pool itself refuses any block or
//! in-place growth beyond it, its `peak_reserved` is the measured peak device bytes, and the bytes
//! count in the runtime's account, where its other pools see them. Weights bypass the runtime's
//! shared weight store: the schedule decides where each one lives.
//! Embedding lookups whose ids the host writes may keep their table in host memory and upload
//! only the rows a run selects ([`gather`]): that is what lets a budget below the largest table
//! run at all on a discrete device.
//! Host copies live in two host-visible pools the model owns: `Upload` blocks hold each streamed
//! weight's master copy (and, on unified memory, every tensor the schedule keeps out of device
//! memory, which kernels then bind in place); `Readback` blocks receive activations copied out.
//!
//! Per run, in op order: before op `k`, the residencies that start at `k` arrive (a streamed
//! weight: a device copy from its master; a recomputed activation: its producer re-run
//! ([`recompute`]); a swapped activation: a device copy from its `Readback` slot
//! where the backend copies out of host-visible memory ([`crate::Capabilities::host_visible_copies`]),
//! else its copy-out is read back and staged in); op `k` is dispatched on the ranges of the residencies that hold its operands; after it,
//! residencies that end with a copy-out are copied to their `Readback` slot. The device copies
//! (prefetches and copy-outs) run on the backend's transfer lane beside the kernels, ordered
//! device-side ([`lanes`]): a kernel waits only for the copies it reads and for copy-outs of the
//! bytes it overwrites. The host waits only to bring an activation back through host code (its
//! copy-out must have landed; never where the swap-in is a device copy); that wait plus the compute lane's device-side waits for the transfer lane (where the
//! backend measures them, [`crate::TransferLanes::transfer_stall`]) is the reported stall.
//!
//! # Limits
//! * Where the backend copies only in the staging directions (WebGPU: a `MAP_READ` buffer is no
//!   copy source), a swap-in goes through the host: the host waits for the copy-out (on the
//!   transfer lane only, not on the kernels queued before it), reads the slot and stages the
//!   bytes back in as compute-lane work.
//! * Where the backend collapses the transfer lane onto its one queue (wgpu; Vulkan with its
//!   lane switched off) copies still run between kernels; the two-lane stall model predicts what
//!   a concurrent lane achieves.
//! * Ops are never split here: a budget below one op's operands (MiniLM's untiled attention
//!   softmax at sequence 512 binds 201 MB) is [`Error::BudgetBelowWorkingSet`]; tiling the chain
//!   beforehand ([`Graph::tile`](crate::Graph::tile)) is what brings such an op within a budget.
//! * In a browser (`wasm32`) the host's waits are awaited: [`Model::run_async`] runs every
//!   schedule, while the synchronous [`Model::enqueue`] refuses one that waits on the host.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{BlockRange, MemoryKind, Ticket, TransferTicket};
use crate::offload::{Arrival, TensorClass};
use crate::pool::{Allocation, ArenaConfig, ArenaPool, Budget, DevicePool};
use crate::runtime::Runtime;
use crate::{Error, Result};

use super::Model;

mod compile;
mod desc;
mod gather;
mod host_io;
pub(crate) mod lanes;
mod rates;
mod recompute;
mod run_trace;

use compile::Variant;
pub use desc::{CompileDesc, OffloadReport};
use gather::RowGather;
pub use rates::Rates;
use recompute::Reruns;
use run_trace::OffloadTrace;

/// Where a tensor's bytes are at one step.
#[derive(Copy, Clone, Debug)]
enum Site {
    /// In the arena at this offset.
    Arena(u64),
    /// In its host-visible allocation (unified memory).
    Host,
}

/// `(offset, size)` of a binding in its root tensor's bytes.
type Span = (u64, u64);

/// The per-run program of a budgeted model.
pub(super) struct Offloaded {
    /// The model's device pool, limited to the budget.
    device: Arc<dyn DevicePool>,
    /// Device memory is host-visible and staging is not forced: map instead of staging.
    unified: bool,
    /// Per root tensor: its arena offset between runs (inputs, resident weights) or after the run
    /// (outputs), where the host writes and reads it.
    fixed_at: Vec<Option<u64>>,
    /// Host-visible `Upload` pool: masters of streamed weights, host-resident tensors.
    upload: Arc<dyn DevicePool>,
    /// Host-visible `Readback` pool: copy-out slots.
    readback: Arc<dyn DevicePool>,
    /// The arena in the runtime's device pool (`None` when nothing is on the device).
    arena: Option<Allocation>,
    /// Per root tensor: its `Upload` allocation (streamed weight master, host-resident tensor).
    host: Vec<Option<Allocation>>,
    /// Per root tensor: its `Readback` copy-out slot.
    slot: Vec<Option<Allocation>>,
    /// Per root tensor: transfer ticket of its latest copy-out.
    out_ticket: Vec<TransferTicket>,
    /// Copies go on the transfer lane ([`CompileDesc::transfer_lane`]).
    transfer_lane: bool,
    /// Swap-ins are device copies from the `Readback` slots ([`CompileDesc::direct_swap_in`]
    /// where the backend allows it).
    direct_swap_in: bool,
    /// The backend's transfer stall when the last run was enqueued (see [`Offloaded::finish`]).
    stall_mark: Option<Duration>,
    /// Per op: arrivals before it, as `(tensor, arena offset, arrival)`.
    arrive: Vec<Vec<(usize, u64, Arrival)>>,
    /// Per op: copy-outs after it, as `(tensor, arena offset)`.
    leave: Vec<Vec<(usize, u64)>>,
    /// Per op: the producers re-run before it ([`recompute`]).
    reruns: Reruns,
    /// Per op: where each binding (inputs, then the output) is, as its root tensor, the root's
    /// site, and the binding's `(offset, size)` in the root ([`super::span`]: views bind a range).
    sites: Vec<Vec<(usize, Site, Span)>>,
    /// Padded byte size per root tensor.
    sizes: Vec<u64>,
    /// Ticket of the last work enqueued (host writes to masters wait for it).
    last: Ticket,
    pub(super) report: OffloadReport,
    /// Per root tensor: the host copy of a table, scales or ids that a lookup served from host
    /// memory reads (empty until written), when `keeps_copy`.
    host_copy: Vec<Vec<u8>>,
    keeps_copy: Vec<bool>,
    /// The lookups served from host memory ([`gather`]).
    gathers: Vec<RowGather>,
    /// Per op: the lookup in `gathers` that replaces it.
    gather_at: Vec<Option<usize>>,
    /// Per tensor of the schedule: the lookup and operand a staged tensor holds.
    staged_part: Vec<Option<(usize, gather::Part)>>,
    /// The run's trace, when the runtime had a tracer at compile time ([`run_trace`]).
    trace: Option<OffloadTrace>,
}

impl Offloaded {
    fn build(
        rt: &Runtime,
        graph: &crate::Graph,
        v: Variant,
        budget: u64,
        unified: bool,
        desc: &CompileDesc,
    ) -> Result<Model> {
        let transfer_lane = desc.transfer_lane;
        let direct_swap_in = desc.direct_swap_in && rt.backend().capabilities().host_visible_copies;
        let Variant {
            items,
            sizes,
            schedule,
            gathers,
            rates,
        } = v;
        let n = graph.nodes().len();
        let backend = rt.backend().clone();
        let tracer = rt.tracer();
        let (upload, upload_ids) = run_trace::pool(
            ArenaPool::new(
                backend.clone(),
                ArenaConfig::host_visible(MemoryKind::Upload),
            )?,
            tracer.as_ref(),
        );
        let (readback, readback_ids) = run_trace::pool(
            ArenaPool::new(backend, ArenaConfig::host_visible(MemoryKind::Readback))?,
            tracer.as_ref(),
        );
        let caps = rt.backend().capabilities();
        let align = caps.binding_align.max(caps.copy_align).max(1);
        // The model's own account within the runtime's: its budget is a hard limit the pool
        // checks on every reservation and every in-place growth, and its bytes count against the
        // runtime's limit beside the runtime's pools.
        let (device, device_ids) = run_trace::pool(
            ArenaPool::with_budget(
                rt.backend().clone(),
                ArenaConfig {
                    name: "device (budgeted model)".into(),
                    kind: MemoryKind::DeviceLocal,
                    block_size: schedule.peak.max(1),
                    ..ArenaConfig::device()
                },
                Budget::sub_account(rt.budget(), Some(budget)),
            )?,
            tracer.as_ref(),
        );
        let mut model = Model {
            rt: rt.clone(),
            graph: graph.clone(),
            places: vec![None; graph.tensors().len()],
            owned: Vec::new(),
            weight_keys: vec![None; graph.tensors().len()],
            segmented: Vec::new(),
            align: align.next_power_of_two(),
            report: super::MemoryReport::default(),
            offload: None,
        };
        let arena = if schedule.peak > 0 {
            Some(device.allocate(
                schedule.peak,
                align.next_power_of_two(),
                "budgeted model (arena)",
            )?)
        } else {
            None
        };
        let mut host = vec![None; items.len()];
        let mut slot = vec![None; items.len()];
        let mut arrive = vec![Vec::new(); n];
        let mut leave = vec![Vec::new(); n];
        let mut at: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); items.len()];
        let mut rerun = Vec::new();
        for r in &schedule.residencies {
            at[r.tensor].push((r.lower, r.upper, r.offset));
            if let Arrival::Recompute { op } = r.arrival {
                rerun.push((r.lower, r.tensor, op));
            } else if r.arrival != Arrival::InPlace && (r.lower as usize) < n {
                arrive[r.lower as usize].push((r.tensor, r.offset, r.arrival));
            }
            if r.copy_out {
                leave[r.upper as usize - 1].push((r.tensor, r.offset));
                if slot[r.tensor].is_none() {
                    let label = &graph.tensors()[r.tensor].name;
                    slot[r.tensor] = Some(readback.allocate(sizes[r.tensor], 1, label)?);
                }
            }
        }
        let reruns = Reruns::new(graph, &rerun, &at, &sizes)?;
        let decls = graph.tensors();
        // Tables, scales and ids of the lookups served from host memory: kept in host memory.
        let mut keeps_copy = vec![false; decls.len()];
        for g in &gathers {
            for t in [Some(g.table), g.scales, Some(g.ids)].into_iter().flatten() {
                keeps_copy[t] = true;
            }
        }
        let mut fixed_at = vec![None; items.len()];
        for (i, t) in items.iter().enumerate() {
            // Staged tensors (past the graph's) arrive from host memory each run: nothing fixed.
            let Some(decl) = decls.get(i) else {
                continue;
            };
            if decl.alias_of.is_some() || (keeps_copy[i] && t.uses.is_empty()) {
                continue;
            }
            let streamed = t.class == TensorClass::Weight
                && at[i].iter().all(|&(lo, hi, _)| (lo, hi) != (0, n as u64));
            // An unused weight, input or output still has bytes the host may set or read; an
            // unused intermediate (one a tiling replaced by its parts) has none.
            let unused = t.uses.is_empty() && t.class != TensorClass::Intermediate;
            let off_device = schedule.host_resident.get(i).copied().unwrap_or(false) || unused;
            if streamed || off_device {
                host[i] = Some(upload.allocate(sizes[i], align.next_power_of_two(), &decl.name)?);
            }
            // The residency that holds the tensor between runs (weights, inputs) or after the run
            // (outputs) is where the host writes and reads it.
            let fixed = match t.class {
                TensorClass::Weight | TensorClass::Input => at[i].iter().find(|r| r.0 == 0),
                TensorClass::Output => at[i].iter().find(|r| r.1 == n as u64),
                TensorClass::Intermediate | TensorClass::Staged => None,
            };
            if let (Some(&(_, _, offset)), false) = (fixed, streamed) {
                fixed_at[i] = Some(offset);
            }
        }
        let mut gather_at = vec![None; n];
        let mut staged_part = vec![None; items.len()];
        for (gi, g) in gathers.iter().enumerate() {
            gather_at[g.step] = Some(gi);
            for &(t, part) in &g.staged {
                staged_part[t] = Some((gi, part));
            }
        }
        let mut sites = vec![Vec::new(); n];
        for (k, node) in graph.nodes().iter().enumerate() {
            // Per binding: the root and the range of it bound.
            let bound: Vec<(usize, Span)> = match gather_at[k] {
                Some(gi) => gathers[gi]
                    .staged
                    .iter()
                    .map(|&(t, _)| (t, (0, sizes[t])))
                    .collect(),
                None => node
                    .inputs
                    .iter()
                    .map(|&t| {
                        let root = graph.root(t).index();
                        Ok((root, super::span(graph, t, sizes[root])?))
                    })
                    .collect::<Result<_>>()?,
            };
            let output = graph.root(node.output).index();
            let output_span = super::span(graph, node.output, sizes[output])?;
            for (root, span) in bound
                .into_iter()
                .chain(std::iter::once((output, output_span)))
            {
                let k64 = k as u64;
                let site = match at[root].iter().find(|r| r.0 <= k64 && k64 < r.1) {
                    Some(&(_, _, offset)) => Site::Arena(offset),
                    None if host[root].is_some() => Site::Host,
                    None => {
                        return Err(rt.front().mark_broken(Error::invariant(
                            "an offload schedule keeps every operand on the device or in host memory",
                            format!("op {k} ('{}') binds tensor {root} nowhere", node.label),
                        )));
                    }
                };
                sites[k].push((root, site, span));
            }
        }
        let report = OffloadReport {
            budget,
            planned_peak: schedule.peak,
            score: schedule.score.name().to_string(),
            outcomes: schedule.outcomes.clone(),
            unified,
            transfer_lane: transfer_lane
                && crate::backend::lanes::of(rt.backend().as_ref()).transfer_lane()
                    == crate::backend::TransferLane::Concurrent,
            direct_swap_in,
            link_bandwidth: rates.0,
            device_rate: rates.1,
            ..OffloadReport::default()
        };
        model.report = super::MemoryReport {
            weight_bytes: items
                .iter()
                .filter(|t| t.class == TensorClass::Weight)
                .map(|t| t.size)
                .sum(),
            io_bytes: items
                .iter()
                .filter(|t| matches!(t.class, TensorClass::Input | TensorClass::Output))
                .map(|t| t.size)
                .sum(),
            activation_planned_bytes: schedule.peak,
            plan_algorithm: schedule.plan_algorithm.clone(),
            planned_buffers: schedule.residencies.len(),
            ..super::MemoryReport::default()
        };
        let trace = tracer.map(|tracer| {
            let id = |ids: &Option<Arc<crate::pool::TraceIds>>, a: &Option<Allocation>| {
                ids.as_ref()
                    .zip(a.as_ref())
                    .map_or(0, |(ids, a)| ids.id(a.handle))
            };
            let residencies: Vec<run_trace::Residency> = schedule
                .residencies
                .iter()
                .map(|r| (r.tensor, r.lower, r.upper, r.offset))
                .collect();
            OffloadTrace::new(
                tracer,
                device.name(),
                n,
                &residencies,
                (
                    id(&device_ids, &arena),
                    host.iter().map(|a| id(&upload_ids, a)).collect(),
                    slot.iter().map(|a| id(&readback_ids, a)).collect(),
                ),
            )
        });
        model.offload = Some(Box::new(Offloaded {
            device,
            unified,
            fixed_at,
            upload,
            readback,
            arena,
            host,
            slot,
            out_ticket: vec![TransferTicket::DONE; items.len()],
            transfer_lane,
            direct_swap_in,
            stall_mark: None,
            arrive,
            leave,
            reruns,
            sites,
            sizes,
            last: Ticket::DONE,
            report,
            host_copy: vec![Vec::new(); decls.len()],
            keeps_copy,
            gathers,
            gather_at,
            staged_part,
            trace,
        }));
        Ok(model)
    }

    fn arena_range(&self, offset: u64, size: u64) -> Result<BlockRange> {
        let a = self
            .arena
            .ok_or_else(|| Error::invariant("an arena residency needs an arena", "none"))?;
        let base = self.device.resolve(a.handle)?;
        Ok(BlockRange {
            block: base.block,
            offset: base.offset + offset,
            size,
        })
    }
}

/// The model's allocations go back to its pools after its last run (the pools, dropped with it,
/// return their blocks); a traced model's lifetimes end here.
impl Drop for Offloaded {
    fn drop(&mut self) {
        let last = self.last;
        let frees = self.arena.iter().map(|a| (&self.device, a));
        let host = self.host.iter().flatten().map(|a| (&self.upload, a));
        let slots = self.slot.iter().flatten().map(|a| (&self.readback, a));
        for (pool, a) in frees.chain(host).chain(slots) {
            let _ = pool.free_after(a.handle, last);
        }
    }
}

impl Offloaded {
    /// Highest bytes the model's device pool has reserved (the measured peak device bytes), and
    /// highest bytes it had handed out.
    pub(super) fn peak_device_bytes(&self) -> (u64, u64) {
        let s = self.device.stats();
        (s.peak_reserved, s.peak_in_use)
    }
}

impl super::MemoryReport {
    /// Device bytes the model needs without a budget: weights, inputs and outputs with their
    /// alignment padding, and the planned activation arena (what a percentage budget is a
    /// percentage of).
    pub fn unbudgeted_device_bytes(&self) -> u64 {
        self.weight_bytes + self.io_bytes + self.padding_bytes + self.activation_planned_bytes
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod trace_tests;
