//! Recompute as the third offload choice (Capuchin, Peng et al., ASPLOS'20): an activation may be
//! dropped after a use and produced again, right before its next use, by re-running the op that
//! wrote it, instead of being copied out and back.
//!
//! Design: the caller states which tensors can be re-run ([`Recomputable`]: per tensor, its one
//! producing op and the tensors that op reads); the selection offers every gap between two uses
//! of such a tensor as a recompute absence, away over `[use + 1, next use)` and re-produced before
//! op `next use` ([`Arrival::Recompute`]). Per gap it takes the cheaper way that is possible now:
//! a swap costs `2 × size / link_bandwidth` (out and back), a recompute `op bytes /
//! device_bandwidth` (the op's work over the device's rate); a gap too short for a swap (no
//! longer than the prefetch lead) can still be recomputed.
//!
//! Invariants:
//! * a recompute is taken only while every input of its producer is resident at the step it
//!   re-runs (a residency covers that step), and from then on each such input is *pinned* there:
//!   no later absence of it may span that step, so the inputs stay resident in the final schedule;
//! * the re-run reads the same bytes as the first run when each input has at most one writer
//!   (checked by the caller, who knows the graph): the outputs stay bit-identical;
//! * inputs recomputed at the same step are re-run first (their producer comes earlier in op
//!   order, and the runtime re-runs a step's recomputes in producer order).
//!
//! Costs: feasibility is one scan of the residencies per input per candidate; pins one pass over
//! the chosen absences per selection step. A chain (an input that is itself not resident and
//! re-run too) is not offered: only inputs resident at the step qualify.

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

/// The way to free tensor `tensor` over a gap given its swap spans (empty: too short) and its
/// recompute span `(from, at)`, under the residencies `res` of the choices so far; `None` when
/// neither frees anything now.
pub(super) fn way(
    tensor: usize,
    swap: &[(u64, u64)],
    recompute: Option<(u64, u64)>,
    (tensors, ops, rc): (&[OffloadTensor], &[OffloadOp], &Recomputable),
    res: &[Residency],
    desc: &OffloadDesc,
) -> Option<Way> {
    let rc_ok = !desc.unified
        && recompute
            .zip(rc.producer(tensor))
            .is_some_and(|((_, at), p)| p.inputs.iter().all(|&i| resident_at(res, i, at)));
    let cheaper = || {
        rc.producer(tensor)
            .and_then(|p| ops.get(p.op as usize))
            .is_some_and(|op| prefers_recompute(tensors[tensor].size, op, desc))
    };
    match (rc_ok, swap.is_empty()) {
        (true, true) => Some(Way::Recompute),
        (true, false) if cheaper() => Some(Way::Recompute),
        (_, false) => Some(Way::Swap),
        (false, true) => None,
    }
}

/// Per tensor, the steps it must stay resident at: every step a chosen recompute re-runs a
/// producer that reads it.
pub(super) fn pins(
    tensors: usize,
    chosen: impl Iterator<Item = (usize, u64)>,
    rc: &Recomputable,
) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); tensors];
    for (t, at) in chosen {
        for &i in rc.producer(t).map_or(&[][..], |p| &p.inputs) {
            out[i].push(at);
        }
    }
    out
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
