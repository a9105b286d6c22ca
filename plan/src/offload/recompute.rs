//! Recompute as the third offload choice (Capuchin, Peng et al., ASPLOS'20): an activation may be
//! dropped after a use and produced again, right before its next use, by re-running the op that
//! wrote it, instead of being copied out and back.
//!
//! Design: the caller states which tensors can be re-run ([`Recomputable`]: per tensor, its one
//! producing op and the tensors that op reads); the selection offers every gap between two uses
//! of such a tensor as a recompute absence, away over `[use + 1, next use)` and re-produced before
//! op `next use` ([`Arrival::Recompute`]). An input of the producer that is not resident then but
//! can itself be re-run from what is (recursively, [`MAX_CHAIN_OPS`] ops in all) joins a *chain*:
//! it is re-run first into a transient residency `[next use, next use + 1)` that holds it only
//! while the re-runs read it. Per gap the selection takes the cheaper way that is possible now: a
//! swap costs `2 × size / link_bandwidth` (out and back), a recompute the chain's op bytes over
//! `device_bandwidth`; a gap too short for a swap (no longer than the prefetch lead) can still be
//! recomputed.
//!
//! Invariants:
//! * a recompute is taken only while every input of each producer its chain re-runs is resident
//!   at the step or re-run there before it (a residency covers that step), and from then on each
//!   such input is *pinned* there: no later absence of it may span that step, so the inputs stay
//!   resident in the final schedule;
//! * a chain's transient residencies count in the step's load like any residency, so the budget
//!   holds while the chain runs;
//! * the re-run reads the same bytes as the first run when each input has at most one writer
//!   (checked by the caller, who knows the graph): the outputs stay bit-identical;
//! * tensors re-run at the same step are re-run in producer order (an input's producer comes
//!   earlier in op order, and the runtime re-runs a step's recomputes in that order).
//!
//! Costs: a chain is a depth-first walk over at most [`MAX_CHAIN_OPS`] producers, each input
//! checked with one scan of the residencies; pins are one pass over the chosen absences per
//! selection step.

use super::{Arrival, OffloadDesc, OffloadOp, OffloadTensor, Residency, TensorClass};
use crate::{Error, Result};

/// The op that writes a tensor, as [`Recomputable`] states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Producer {
    /// Index of the op that writes the whole tensor (its first use).
    pub op: u64,
    /// The tensors (indices into the schedule's input) that op reads.
    pub inputs: Vec<usize>,
}

/// Which tensors the schedule may recompute, and from what. Empty: none (swap only).
#[derive(Clone, Debug, Default)]
pub struct Recomputable {
    producers: Vec<Option<Producer>>,
}

impl Recomputable {
    /// No tensor can be recomputed.
    pub fn none() -> Self {
        Recomputable::default()
    }

    /// Per tensor of the schedule's input (same order and length), its producer, if re-running
    /// that one op reproduces its bytes exactly.
    pub fn new(producers: Vec<Option<Producer>>) -> Self {
        Recomputable { producers }
    }

    /// The producer of tensor `t`.
    pub(super) fn producer(&self, t: usize) -> Option<&Producer> {
        self.producers.get(t).and_then(Option::as_ref)
    }

    /// Checks the table against the schedule's tensors and op count.
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] for a table of another length; [`crate::ArgumentError::Invalid`]
    /// for a producer op beyond the op count or not the tensor's first use, a producer of a tensor
    /// that is not an activation, an input index out of range or the tensor itself.
    pub(super) fn check(&self, tensors: &[OffloadTensor], n: u64) -> Result<()> {
        if self.producers.is_empty() {
            return Ok(());
        }
        if self.producers.len() != tensors.len() {
            return Err(Error::SizeMismatch {
                what: "offload producers (one per tensor)".into(),
                expected: tensors.len() as u64,
                actual: self.producers.len() as u64,
            });
        }
        for (t, p) in self.producers.iter().enumerate() {
            let Some(p) = p else { continue };
            let what = |part: &str| format!("offload: {part} of the producer of tensor {t}");
            let bad = |part: &str, value: String, expected: &str| {
                Err(crate::ArgumentError::invalid_value(what(part), value, expected).into())
            };
            if p.op >= n || tensors[t].uses.first() != Some(&p.op) {
                return bad("op", p.op.to_string(), "the tensor's first use");
            }
            if !matches!(
                tensors[t].class,
                TensorClass::Intermediate | TensorClass::Output
            ) {
                let class = format!("{:?}", tensors[t].class);
                return bad(
                    "tensor class",
                    class,
                    "an activation (only those are produced by ops)",
                );
            }
            if let Some(&i) = p.inputs.iter().find(|&&i| i >= tensors.len() || i == t) {
                let expected = "another tensor of the schedule";
                return bad("input", i.to_string(), expected);
            }
        }
        Ok(())
    }
}

/// How a taken absence frees its tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Way {
    /// Copied out after the use, back before the next (a weight: streamed).
    Swap,
    /// Dropped after the use, re-run before the next.
    Recompute,
}

/// Predicted seconds a swap of `size` bytes costs: out and back over the link.
pub fn swap_seconds(size: u64, desc: &OffloadDesc) -> f64 {
    2.0 * size as f64 / desc.link_bandwidth
}

/// Predicted seconds re-running `op` costs: its bytes over the device rate.
pub fn recompute_seconds(op: &OffloadOp, desc: &OffloadDesc) -> f64 {
    op.bytes as f64 / desc.device_bandwidth
}

/// Whether a tensor of `size` bytes produced by `op` is cheaper re-run than swapped.
pub fn prefers_recompute(size: u64, op: &OffloadOp, desc: &OffloadDesc) -> bool {
    recompute_seconds(op, desc) < swap_seconds(size, desc)
}

/// Whether tensor `t` has a residency covering `step`.
pub(super) fn resident_at(res: &[Residency], t: usize, step: u64) -> bool {
    res.iter()
        .any(|r| r.tensor == t && r.lower <= step && step < r.upper)
}

/// The most ops one recompute re-runs: the tensor's producer and the chain before it.
pub const MAX_CHAIN_OPS: usize = 4;

/// The tensors re-run before `tensor`'s producer at step `at` so that every input it reads is
/// there (a chain, module doc), in producer order; empty when its inputs are all resident. `None`
/// where an input is neither resident at `at` nor re-runnable from what is, or the chain would
/// re-run more than [`MAX_CHAIN_OPS`] ops. Only intermediates join a chain (their transient
/// residency ends before the host reads anything).
pub(super) fn chain(
    tensor: usize,
    at: u64,
    (tensors, _, rc): (&[OffloadTensor], &[OffloadOp], &Recomputable),
    res: &[Residency],
) -> Option<Vec<usize>> {
    let mut chain = Vec::new();
    let mut todo = vec![tensor];
    while let Some(t) = todo.pop() {
        let p = rc.producer(t)?;
        for &i in &p.inputs {
            if resident_at(res, i, at) || chain.contains(&i) {
                continue;
            }
            let joins = tensors[i].class == TensorClass::Intermediate
                && rc.producer(i).is_some_and(|q| q.op < p.op);
            if !joins || chain.len() + 2 > MAX_CHAIN_OPS {
                return None;
            }
            chain.push(i);
            todo.push(i);
        }
    }
    chain.sort_unstable_by_key(|&i| rc.producer(i).map_or(0, |p| p.op));
    Some(chain)
}

/// Predicted seconds re-running `tensor` and its `chain` costs.
fn chain_seconds(
    tensor: usize,
    chain: &[usize],
    ops: &[OffloadOp],
    rc: &Recomputable,
    desc: &OffloadDesc,
) -> f64 {
    chain
        .iter()
        .chain(std::iter::once(&tensor))
        .filter_map(|&t| rc.producer(t).and_then(|p| ops.get(p.op as usize)))
        .map(|op| recompute_seconds(op, desc))
        .sum()
}

/// The way to free tensor `tensor` over a gap given its swap spans (empty: too short) and its
/// recompute span `(from, at)`, under the residencies `res` of the choices so far, with the
/// chain a recompute re-runs first; `None` when neither frees anything now.
pub(super) fn way(
    tensor: usize,
    swap: &[(u64, u64)],
    recompute: Option<(u64, u64)>,
    input: (&[OffloadTensor], &[OffloadOp], &Recomputable),
    res: &[Residency],
    desc: &OffloadDesc,
) -> Option<(Way, Vec<usize>)> {
    let (tensors, ops, rc) = input;
    let chain = recompute
        .filter(|_| !desc.unified)
        .and_then(|(_, at)| chain(tensor, at, input, res));
    match (chain, swap.is_empty()) {
        (Some(c), true) => Some((Way::Recompute, c)),
        (Some(c), false)
            if chain_seconds(tensor, &c, ops, rc, desc)
                < swap_seconds(tensors[tensor].size, desc) =>
        {
            Some((Way::Recompute, c))
        }
        (_, false) => Some((Way::Swap, Vec::new())),
        (None, true) => None,
    }
}

/// Per tensor, the steps it must stay resident at: every step a chosen recompute re-runs a
/// producer (of the tensor or of its chain, `(tensor, step, chain)`) that reads it.
pub(super) fn pins<'a>(
    tensors: usize,
    chosen: impl Iterator<Item = (usize, u64, &'a [usize])>,
    rc: &Recomputable,
) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); tensors];
    for (t, at, chain) in chosen {
        for &r in chain.iter().chain(std::iter::once(&t)) {
            for &i in rc.producer(r).map_or(&[][..], |p| &p.inputs) {
                out[i].push(at);
            }
        }
    }
    out
}

/// The transient residencies of the chosen recomputes' chains (`(tensor, step, chain)`): each
/// chain member once per step, re-run there by its producer and gone after that op.
pub(super) fn transients<'a>(
    chosen: impl Iterator<Item = (usize, u64, &'a [usize])>,
    rc: &Recomputable,
) -> Vec<Residency> {
    let mut seen: Vec<(usize, u64)> = chosen
        .flat_map(|(_, at, chain)| chain.iter().map(move |&t| (t, at)))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.into_iter()
        .filter_map(|(tensor, at)| {
            let op = rc.producer(tensor)?.op;
            Some(Residency {
                tensor,
                lower: at,
                upper: at + 1,
                offset: 0,
                arrival: Arrival::Recompute { op },
                copy_out: false,
            })
        })
        .collect()
}

/// The arrival of a piece that follows an absence taken `way` (`op`: the tensor's producer).
pub(super) fn arrival_after(way: Way, op: Option<u64>) -> Arrival {
    match (way, op) {
        (Way::Recompute, Some(op)) => Arrival::Recompute { op },
        _ => Arrival::SwapIn,
    }
}

#[cfg(test)]
mod tests;
