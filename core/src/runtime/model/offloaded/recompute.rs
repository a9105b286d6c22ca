//! Recomputed residencies of a budgeted model: which graph tensors can be re-run
//! ([`producers`], handed to [`crate::offload::schedule_with_recompute`]) and the re-runs a
//! schedule chose ([`Reruns`]), enqueued before the op that next reads each tensor.
//!
//! Design: a re-run is the tensor's producing node dispatched again, the same op on the same
//! bytes, bound to where its inputs are at the re-run's step and writing into the tensor's new
//! residency; the kernels are the plain run's, so outputs stay bit-identical.
//!
//! Invariants ([`producers`] enforces them from the graph): the tensor is a root (not a view)
//! written by exactly one node, that node is not a lookup served from host memory, and every
//! root it reads has at most one writer and is not the tensor itself, so its bytes at the re-run
//! are those of the first run. The schedule keeps the inputs resident at the re-run's step, or
//! re-runs them there first (a chain: each member in a one-step residency of its own, re-run
//! earlier in the step because its producer comes earlier in op order).
//!
//! Costs: one extra dispatch per re-run on the compute lane; it joins the copy-ins of its
//! inputs and the copy-outs of the bytes it overwrites, as any kernel does.

use crate::backend::{Backend, BlockRange};
use crate::offload::{OffloadTensor, Producer, Recomputable, TensorClass};
use crate::trace::Access;
use crate::{Error, Graph, Result};

use super::lanes::RunLanes;
use super::{Offloaded, Span};

/// Which graph tensors can be re-run (module doc), for a schedule over `items` (the graph's
/// tensors, then any staged ones); nodes at `skip` steps (lookups served from host memory) are
/// not producers.
pub(super) fn producers(graph: &Graph, items: &[OffloadTensor], skip: &[usize]) -> Recomputable {
    let nodes = graph.nodes();
    let mut writers = vec![0usize; items.len()];
    for node in nodes {
        if let Some(w) = writers.get_mut(graph.root(node.output).index()) {
            *w += 1;
        }
    }
    let mut out = vec![None; items.len()];
    for (k, node) in nodes.iter().enumerate() {
        let t = node.output.index();
        let activation = items.get(t).is_some_and(|i| {
            matches!(i.class, TensorClass::Intermediate | TensorClass::Output)
                && i.uses.first() == Some(&(k as u64))
        });
        if skip.contains(&k) || graph.root(node.output) != node.output || !activation {
            continue;
        }
        let mut inputs: Vec<usize> = node.inputs.iter().map(|&i| graph.root(i).index()).collect();
        inputs.sort_unstable();
        inputs.dedup();
        let stable = inputs.iter().all(|&i| i != t && writers[i] <= 1);
        if writers[t] == 1 && stable {
            out[t] = Some(Producer {
                op: k as u64,
                inputs,
            });
        }
    }
    Recomputable::new(out)
}

/// One re-run: node `op` dispatched again before op `step` to produce root tensor `tensor`.
#[derive(Clone, Debug)]
pub(super) struct Rerun {
    tensor: usize,
    op: usize,
    /// Per binding (inputs, then the output): the root, its arena offset at the step, and the
    /// binding's span of the root.
    sites: Vec<(usize, u64, Span)>,
}

/// Per op, the re-runs enqueued before it, in producer order (an input re-run at the same step
/// comes first).
#[derive(Default)]
pub(super) struct Reruns {
    at: Vec<Vec<Rerun>>,
}

impl Reruns {
    /// The re-runs of `chosen` (`(step, tensor, producing op)`), each binding placed by `at`
    /// (per root: its residencies `(lower, upper, offset)`).
    ///
    /// # Errors
    /// [`Error::InvariantViolated`] when a re-run's operand has no residency at its step.
    pub(super) fn new(
        graph: &Graph,
        chosen: &[(u64, usize, u64)],
        at: &[Vec<(u64, u64, u64)>],
        sizes: &[u64],
    ) -> Result<Reruns> {
        let mut out = vec![Vec::new(); graph.nodes().len()];
        for &(step, tensor, op) in chosen {
            let node = graph.nodes().get(op as usize).ok_or_else(|| {
                Error::invariant("a re-run names a node", format!("op {op} of {tensor}"))
            })?;
            let mut sites = Vec::with_capacity(node.inputs.len() + 1);
            for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
                let root = graph.root(t).index();
                let span = super::super::span(graph, t, sizes[root])?;
                let offset = at[root]
                    .iter()
                    .find(|r| r.0 <= step && step < r.1)
                    .map(|r| r.2)
                    .ok_or_else(|| {
                        Error::invariant(
                            "a re-run's operands are resident at its step",
                            format!("tensor {root} at step {step} (re-running '{}')", node.label),
                        )
                    })?;
                sites.push((root, offset, span));
            }
            let slot = out.get_mut(step as usize).ok_or_else(|| {
                Error::invariant("a re-run's step is an op", format!("step {step}"))
            })?;
            slot.push(Rerun {
                tensor,
                op: op as usize,
                sites,
            });
        }
        for step in &mut out {
            step.sort_by_key(|r| r.op);
        }
        Ok(Reruns { at: out })
    }

    /// The re-runs before op `k`.
    pub(super) fn before(&self, k: usize) -> &[Rerun] {
        self.at.get(k).map_or(&[], Vec::as_slice)
    }
}

impl Offloaded {
    /// Enqueues the re-runs before op `k`: each joins what it depends on, then dispatches its
    /// node into the tensor's arena slot (op `k`'s own dispatch follows on the same queue, so its
    /// ticket covers them).
    pub(super) fn rerun(
        &mut self,
        b: &dyn Backend,
        graph: &Graph,
        lanes: &mut RunLanes,
        k: usize,
    ) -> Result<()> {
        let (mut bytes, mut work) = (0, 0);
        for r in self.reruns.before(k) {
            let node = &graph.nodes()[r.op];
            let mut bindings: Vec<BlockRange> = Vec::with_capacity(r.sites.len());
            for &(_, at, (offset, size)) in &r.sites {
                bindings.push(self.arena_range(at + offset, size)?);
            }
            let (&(_, at, (offset, size)), _) = r.sites.split_last().ok_or_else(|| {
                Error::invariant("a re-run binds its output", format!("op {}", r.op))
            })?;
            lanes.before_compute(b, r.sites.iter().map(|s| s.0), &[(at + offset, size)])?;
            if let Some(trace) = &self.trace {
                let label = format!("{} (recompute)", node.label);
                for (i, &(root, _, (_, size))) in r.sites.iter().enumerate() {
                    let access = if i + 1 < r.sites.len() {
                        Access::Read
                    } else {
                        Access::Write
                    };
                    trace.bind(&label, root, true, size, access);
                }
            }
            b.dispatch(&node.op, &bindings)?;
            bytes += self.sizes[r.tensor];
            work += r.sites.iter().map(|s| s.2.1).sum::<u64>();
        }
        self.report.bytes_recomputed += bytes;
        self.report.recompute_work += work;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
