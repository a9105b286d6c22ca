//! Budgeted compilation: the schedule's view of a graph (every tensor's size, class and uses;
//! every op's bytes; the tensors that can be recomputed), the lookups that can be served from host
//! memory, and the choice between scheduling with and without them.

use crate::graph::TensorKind;
use crate::offload::{self, OffloadDesc, OffloadOp, OffloadTensor, TensorClass};
use crate::runtime::Runtime;
use crate::{Error, Result};

use super::gather::{self, RowGather};
use super::recompute;
use super::{CompileDesc, Model, Offloaded};

impl Runtime {
    /// Compiles `graph` as [`Runtime::compile`] does, or, with `desc.device_budget`, within that
    /// many device bytes by offloading (module doc): the returned model never holds more device
    /// memory than the budget, and its outputs equal the unbudgeted model's bit for bit.
    ///
    /// # Errors
    /// As [`Runtime::compile`]; [`Error::BudgetBelowWorkingSet`] naming the op that cannot fit;
    /// [`Error::OutOfMemory`] when the runtime's pool refuses the arena; [`Error::Unsupported`] for
    /// [`Rates::Measured`](super::Rates::Measured) on `wasm32` (measuring blocks).
    pub fn compile_with(&self, graph: &crate::Graph, desc: &CompileDesc) -> Result<Model> {
        let Some(budget) = desc.device_budget else {
            return self.compile(graph);
        };
        let caps = self.backend().capabilities();
        super::super::compile::check_bindings(graph, caps)?;
        let copy_align = caps.copy_align.max(1);
        let align = caps.binding_align.max(copy_align).next_power_of_two();
        let unified = caps.device_host_visible && !self.config().force_staging;
        let tensors = graph.tensors();
        let mut is_output = vec![false; tensors.len()];
        for &o in graph.outputs() {
            graph.decl(o)?;
            is_output[graph.root(o).index()] = true;
        }
        let mut uses: Vec<Vec<u64>> = vec![Vec::new(); tensors.len()];
        let mut ops = Vec::with_capacity(graph.nodes().len());
        for (k, node) in graph.nodes().iter().enumerate() {
            let mut bytes = 0u64;
            for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
                let root = graph.root(t).index();
                if uses[root].last() != Some(&(k as u64)) {
                    uses[root].push(k as u64);
                }
                bytes = bytes.saturating_add(graph.decl(t)?.size()?);
            }
            ops.push(OffloadOp {
                label: node.label.clone(),
                bytes,
            });
        }
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut items = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let size = t
                .size()?
                .checked_next_multiple_of(copy_align)
                .ok_or_else(|| Error::ArithmeticOverflow {
                    what: format!("padded byte size of '{}'", t.name),
                    limit_name: "u64",
                })?;
            let class = match t.kind {
                TensorKind::Input => TensorClass::Input,
                TensorKind::Weight => TensorClass::Weight,
                TensorKind::Intermediate if is_output[i] => TensorClass::Output,
                TensorKind::Intermediate => TensorClass::Intermediate,
            };
            if t.alias_of.is_some() {
                uses[i].clear();
            }
            sizes.push(size);
            items.push(OffloadTensor {
                size,
                class,
                uses: std::mem::take(&mut uses[i]),
            });
        }
        let mut od = OffloadDesc::new(budget, align);
        od.unified = unified;
        od.scores = desc.scores.clone();
        od.min_size = desc.min_offload_size;
        od.prefetch_lead = desc.prefetch_lead;
        od.plan_time_limit = self.config().plan_time_limit;
        let rates = desc.rates.resolve(self)?;
        (od.link_bandwidth, od.device_bandwidth) = rates;
        // On unified memory a table is bound in host memory as it is: nothing to gather.
        let gathers = if unified {
            Vec::new()
        } else {
            gather::find(graph, items.len())?
        };
        let producers = |items: &[OffloadTensor], steps: &[usize]| {
            if desc.recompute {
                recompute::producers(graph, items, steps)
            } else {
                offload::Recomputable::none()
            }
        };
        let rc = producers(&items, &[]);
        let whole = offload::schedule_with_recompute(&items, &ops, &od, &rc);
        if gathers.is_empty() {
            let v = Variant {
                items,
                sizes,
                schedule: whole?,
                gathers,
                rates,
            };
            return Offloaded::build(self, graph, v, budget, unified, desc);
        }
        let (g_items, g_ops, staged) = gather::rewrite(&gathers, &items, &ops, copy_align)?;
        let steps: Vec<usize> = gathers.iter().map(|g| g.step).collect();
        let g_rc = producers(&g_items, &steps);
        let gathered = offload::schedule_with_recompute(&g_items, &g_ops, &od, &g_rc);
        // The variant with the lower predicted stall (then fewer bytes moved) wins; serving the
        // lookups from host memory is what lets a budget below the table's size run at all.
        let cost = |s: &offload::OffloadSchedule| {
            s.outcome()
                .map(|o| (o.predicted_stall, o.bytes_to_device + o.bytes_to_host))
        };
        let (items, schedule, gathers) = match (whole, gathered) {
            (Ok(w), Ok(g)) if cost(&g) < cost(&w) => (g_items, g, gathers),
            (Ok(w), _) => (items, w, Vec::new()),
            (Err(_), Ok(g)) => (g_items, g, gathers),
            // Both fail: the gathered variant's error names the smaller working set.
            (Err(_), Err(e)) => return Err(e.into()),
        };
        if !gathers.is_empty() {
            sizes.extend(staged);
        }
        let v = Variant {
            items,
            sizes,
            schedule,
            gathers,
            rates,
        };
        Offloaded::build(self, graph, v, budget, unified, desc)
    }
}

/// What [`Runtime::compile_with`] hands to [`Offloaded::build`]: the schedule's tensors (the
/// graph's, then the staged operands of `gathers`), their padded sizes, the schedule, and the
/// lookups served from host memory.
pub(super) struct Variant {
    pub(super) items: Vec<OffloadTensor>,
    pub(super) sizes: Vec<u64>,
    pub(super) schedule: offload::OffloadSchedule,
    pub(super) gathers: Vec<RowGather>,
    /// The (link, device) rates the schedule was planned with.
    pub(super) rates: (f64, f64),
}
