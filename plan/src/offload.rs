//! Offload schedules: which tensors leave device memory when, and when they come back, so that a
//! graph whose weights plus peak activations exceed a device budget still runs within it.
//!
//! This is the static half of AutoSwap (Zhang et al., "AutoSwap: Automatic Memory Swapping for
//! Deep Learning", 2019) combined with SmartPool-style offline planning: given every tensor's uses
//! in op order, the schedule
//! 1. lists the *absences* a tensor can take: the gap between two uses of an activation (it is
//!    copied out after the first and back before the second), or, for a weight, the whole time it
//!    is not in use (its host copy is the master, so it is only ever copied in: "streamed");
//! 2. ranks them by one of four [`Score`]s and, while the device load at the peak step is above
//!    the budget, takes the best absence that *spans that peak* and is not tiny; an activation
//!    whose producer can be re-run ([`Recomputable`]) is recomputed instead of swapped where that
//!    is cheaper and its producer's inputs are resident then or re-runnable from resident ones
//!    (a short chain, [`recompute`]);
//! 3. places every device residency interval (the swapped-in copies included) with the static
//!    planner ([`crate::plan::solve`]) under the budget as capacity, lowering the load target when
//!    fragmentation leaves the placed peak above the budget;
//! 4. predicts the stall of each score's schedule with a two-lane model (ops on the compute lane,
//!    copies on a transfer lane, each prefetch issued [`OffloadDesc::prefetch_lead`] ops before its
//!    use) and keeps the score with the lowest predicted stall, reporting all four.
//!
//! Time is the op index: op `k` runs at step `k`; a residency interval `[lower, upper)` holds the
//! tensor's bytes from before op `lower` until after op `upper - 1`. A copy out is issued right
//! after the op of last use; a copy in right before op `next use - lead`.
//!
//! Tensors of class [`TensorClass::Staged`] are written by the host before their one use in every
//! run (the table rows an embedding lookup selects, gathered on the host by the runtime): they
//! arrive like a prefetch ([`Arrival::HostWrite`]) and never leave.
//!
//! On unified memory (device memory is host-visible: integrated GPUs, lavapipe, the host backend)
//! nothing needs to move: a chosen tensor simply lives in host-visible memory for the whole run and
//! kernels bind it there ([`OffloadDesc::unified`]).
//!
//! The module is pure (no device, no runtime types) so that schedules are testable on their own.

#![forbid(unsafe_code)]

use std::time::Duration;

use crate::plan;
use crate::{Error, Result};

pub mod recompute;
mod select;

pub use recompute::{Producer, Recomputable};
pub use select::score_value;

/// How absences are ranked (AutoSwap's priority scores).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Score {
    /// Area of absence: size × steps away. Frees the most byte-steps first.
    Area,
    /// Duration of absence: steps away, larger tensors first on ties. Prefers long absences, whose
    /// copies are easiest to hide.
    Duration,
    /// Size-weighted duration: size × the steps away, each step weighted by its device load
    /// relative to the peak load, so absences over the crowded part of the run count most.
    SizeWeighted,
    /// Submodular coverage: the bytes the absence removes from what is still above the target at
    /// each step it spans. A large tensor earns nothing for bytes beyond what a step still needs
    /// (diminishing returns), and each pick lowers the value of the absences that overlap it.
    Submodular,
}

impl Score {
    /// All four, in report order.
    pub const ALL: [Score; 4] = [
        Score::Area,
        Score::Duration,
        Score::SizeWeighted,
        Score::Submodular,
    ];

    /// Short name for reports ("area", "duration", "size-weighted", "submodular").
    pub fn name(self) -> &'static str {
        match self {
            Score::Area => "area",
            Score::Duration => "duration",
            Score::SizeWeighted => "size-weighted",
            Score::Submodular => "submodular",
        }
    }
}

/// What a tensor is to the schedule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TensorClass {
    /// Kept across runs; its host copy is the master, so it is streamed in and never copied out.
    Weight,
    /// Written by the host before the run: always resident (not offloaded).
    Input,
    /// Produced by an op and read by the host after the run: resident from its production to the
    /// end; it may leave between internal uses.
    Output,
    /// Produced and consumed inside the run.
    Intermediate,
    /// Written from host memory before its one use in every run (the table rows an embedding
    /// lookup needs, gathered on the host): on the device from `prefetch_lead` ops before that
    /// use until after it, never offloaded.
    Staged,
}

/// One tensor as the schedule sees it.
#[derive(Clone, Debug)]
pub struct OffloadTensor {
    /// Bytes on the device (already padded to the copy alignment).
    pub size: u64,
    /// Its role.
    pub class: TensorClass,
    /// Op indices that bind it, ascending, without repeats. Empty: never used (no storage).
    pub uses: Vec<u64>,
}

/// One op as the schedule sees it.
#[derive(Clone, Debug)]
pub struct OffloadOp {
    /// Label, for the error that names an op whose working set exceeds the budget.
    pub label: String,
    /// Bytes the op binds: its compute-time estimate is `bytes / device_bandwidth`.
    pub bytes: u64,
}

/// Configuration of [`schedule`].
#[derive(Clone, Debug)]
pub struct OffloadDesc {
    /// Device bytes the placed schedule may use at most.
    pub budget: u64,
    /// Offset alignment of every placed interval (a power of two).
    pub align: u64,
    /// Absences of tensors smaller than this are not considered (default 64 KiB): moving them
    /// frees little and costs a copy's fixed overhead each.
    pub min_size: u64,
    /// Ops between a prefetch's issue and its use (default 1): the copy overlaps that many ops on
    /// the transfer lane. Larger hides slower links, at the price of holding the copy longer.
    pub prefetch_lead: u64,
    /// Host-device link bandwidth of the stall model, bytes per second (default 16 GB/s, PCIe 4 x16).
    pub link_bandwidth: f64,
    /// Device memory bandwidth of the stall model, bytes per second (default 400 GB/s).
    pub device_bandwidth: f64,
    /// Scores to try (default all four); the one with the lowest predicted stall wins.
    pub scores: Vec<Score>,
    /// Device memory is host-visible: chosen tensors live in host-visible memory for the whole run
    /// and nothing is copied.
    pub unified: bool,
    /// Time the planner may spend per placement (default 50 ms).
    pub plan_time_limit: Duration,
}

impl OffloadDesc {
    /// The defaults for a budget of `budget` bytes and placement alignment `align`.
    pub fn new(budget: u64, align: u64) -> Self {
        OffloadDesc {
            budget,
            align,
            min_size: 64 << 10,
            prefetch_lead: 1,
            link_bandwidth: 16e9,
            device_bandwidth: 400e9,
            scores: Score::ALL.to_vec(),
            unified: false,
            plan_time_limit: Duration::from_millis(50),
        }
    }
}

/// How a residency interval's bytes get onto the device at its start.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Already there: written by the host before the run (inputs, resident weights) or produced
    /// by the op at `lower`.
    InPlace,
    /// Copied from the tensor's host master (a streamed weight) before op `lower`.
    Prefetch,
    /// Copied back from where the previous interval's copy-out put it, before op `lower`.
    SwapIn,
    /// Written from host memory before op `lower` (a [`TensorClass::Staged`] tensor).
    HostWrite,
    /// Produced again before op `lower` by re-running op `op` (its producer) into the
    /// residency's offset, from inputs resident at `lower` ([`recompute`]).
    Recompute {
        /// The producing op.
        op: u64,
    },
}

/// One device residency interval of one tensor, with its planned offset.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Residency {
    /// The tensor (index into the schedule's input).
    pub tensor: usize,
    /// First step it is on the device.
    pub lower: u64,
    /// First step it is gone (exclusive).
    pub upper: u64,
    /// Offset in the planned device arena, in bytes.
    pub offset: u64,
    /// How its bytes arrive.
    pub arrival: Arrival,
    /// Copied out after op `upper - 1` (an activation that comes back later by
    /// [`Arrival::SwapIn`]).
    pub copy_out: bool,
}

/// What one score achieved (every score tried is reported, the winner included).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreOutcome {
    /// The score.
    pub score: Score,
    /// Placed device peak in bytes; `None` when the score found no schedule within the budget.
    pub peak: Option<u64>,
    /// Bytes copied host-to-device per run.
    pub bytes_to_device: u64,
    /// Bytes copied device-to-host per run.
    pub bytes_to_host: u64,
    /// Absences taken.
    pub absences: usize,
    /// Bytes produced again by re-running ops, per run ([`Arrival::Recompute`]).
    pub bytes_recomputed: u64,
    /// Extra work per run: the bytes the re-run ops bind.
    pub recompute_work: u64,
    /// Time per run the two-lane model predicts offloading costs: ops waiting for copies, plus
    /// the re-run ops.
    pub predicted_stall: Duration,
}

/// A placed offload schedule. See the module doc.
#[derive(Clone, Debug)]
pub struct OffloadSchedule {
    /// The winning score.
    pub score: Score,
    /// Every device residency interval, placed.
    pub residencies: Vec<Residency>,
    /// Per tensor: whether it lives in host memory for the whole run (unified memory only).
    pub host_resident: Vec<bool>,
    /// The placed peak in bytes: the arena size, at most the budget.
    pub peak: u64,
    /// The planner that placed it.
    pub plan_algorithm: String,
    /// Every score's outcome, in [`Score::ALL`] order.
    pub outcomes: Vec<ScoreOutcome>,
}

impl OffloadSchedule {
    /// The winner's outcome.
    pub fn outcome(&self) -> Option<&ScoreOutcome> {
        self.outcomes.iter().find(|o| o.score == self.score)
    }
}

/// One absence a tensor may take.
#[derive(Clone, Debug)]
struct Absence {
    tensor: usize,
    /// Steps away when swapped or streamed: `[from, to)`, possibly wrapping past the end of the
    /// run (weights); empty when the gap is too short for a copy.
    spans: Vec<(u64, u64)>,
    /// Steps away when recomputed instead: `[from, at)`, re-run before op `at`.
    recompute: Option<(u64, u64)>,
}

/// Computes an offload schedule for `tensors` over `ops` within `desc.budget`. See the module doc.
///
/// # Errors
/// [`Error::BudgetBelowWorkingSet`] naming the first op whose operands (plus what cannot leave
/// around it) exceed the budget; [`crate::ArgumentError::OutOfRange`] for a use beyond the op
/// count, [`crate::ArgumentError::Zero`] for no score, [`Error::InvalidAlignment`]; planner errors.
pub fn schedule(
    tensors: &[OffloadTensor],
    ops: &[OffloadOp],
    desc: &OffloadDesc,
) -> Result<OffloadSchedule> {
    schedule_with_recompute(tensors, ops, desc, &Recomputable::none())
}

/// [`schedule`], where the tensors `rc` names may also be recomputed ([`recompute`]).
///
/// # Errors
/// As [`schedule`]; [`Error::SizeMismatch`] or [`crate::ArgumentError::Invalid`] for a producer
/// table that does not fit the tensors and ops.
pub fn schedule_with_recompute(
    tensors: &[OffloadTensor],
    ops: &[OffloadOp],
    desc: &OffloadDesc,
    rc: &Recomputable,
) -> Result<OffloadSchedule> {
    let n = ops.len() as u64;
    if !desc.align.is_power_of_two() {
        return Err(Error::InvalidAlignment {
            align: desc.align,
            max: 1 << 62,
        });
    }
    if desc.scores.is_empty() {
        return Err(crate::ArgumentError::zero("offload scores to try").into());
    }
    if let Some(t) = tensors.iter().position(|t| t.uses.iter().any(|&u| u >= n)) {
        let last = tensors[t].uses.iter().copied().max().unwrap_or(n);
        let what = format!("offload: op used by tensor {t}");
        return Err(crate::ArgumentError::out_of_range(what, last, n).into());
    }
    rc.check(tensors, n)?;
    check_working_sets(tensors, ops, desc)?;
    let absences = absences(tensors, n, desc, rc);
    let mut outcomes = Vec::new();
    let mut best: Option<(Score, select::Placed)> = None;
    let mut first_error = None;
    for &score in &desc.scores {
        match select::run((tensors, ops, rc), &absences, desc, score) {
            Ok(placed) => {
                outcomes.push(placed.outcome(score));
                let better = best
                    .as_ref()
                    .is_none_or(|(_, b)| (placed.stall, placed.moved()) < (b.stall, b.moved()));
                if better {
                    best = Some((score, placed));
                }
            }
            Err(e) => {
                outcomes.push(ScoreOutcome {
                    score,
                    peak: None,
                    bytes_to_device: 0,
                    bytes_to_host: 0,
                    absences: 0,
                    bytes_recomputed: 0,
                    recompute_work: 0,
                    predicted_stall: Duration::ZERO,
                });
                first_error.get_or_insert(e);
            }
        }
    }
    match best {
        Some((score, placed)) => Ok(OffloadSchedule {
            score,
            residencies: placed.residencies,
            host_resident: placed.host_resident,
            peak: placed.peak,
            plan_algorithm: placed.algorithm,
            outcomes,
        }),
        None => Err(first_error
            .unwrap_or_else(|| Error::invariant("a score ran", "no outcome and no error"))),
    }
}

/// Every op's operands must fit at once: otherwise no schedule exists.
fn check_working_sets(
    tensors: &[OffloadTensor],
    ops: &[OffloadOp],
    desc: &OffloadDesc,
) -> Result<()> {
    if desc.unified {
        return Ok(()); // operands may live in host memory, bound in place: the selection decides
    }
    let mut ws = vec![0u64; ops.len()];
    for t in tensors {
        for &u in &t.uses {
            ws[u as usize] = ws[u as usize].saturating_add(plan::align_up(t.size, desc.align));
        }
    }
    let inputs: u64 = tensors
        .iter()
        .filter(|t| t.class == TensorClass::Input && !t.uses.is_empty())
        .map(|t| plan::align_up(t.size, desc.align))
        .sum();
    for (k, op) in ops.iter().enumerate() {
        let uses_inputs: u64 = tensors
            .iter()
            .filter(|t| t.class == TensorClass::Input && t.uses.binary_search(&(k as u64)).is_ok())
            .map(|t| plan::align_up(t.size, desc.align))
            .sum();
        let needed = ws[k] + inputs - uses_inputs;
        if needed > desc.budget {
            return Err(Error::BudgetBelowWorkingSet {
                step: k,
                op: op.label.clone(),
                needed,
                budget: desc.budget,
            });
        }
    }
    Ok(())
}

/// The absences each tensor can take (module doc). An absence frees the tensor's bytes from the
/// step after a use until `prefetch_lead` steps before the next one, so only gaps longer than the
/// lead free anything.
fn absences(
    tensors: &[OffloadTensor],
    n: u64,
    desc: &OffloadDesc,
    rc: &Recomputable,
) -> Vec<Absence> {
    let lead = desc.prefetch_lead;
    let mut out = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        if t.size < desc.min_size || t.uses.is_empty() {
            continue;
        }
        let gaps = t
            .uses
            .windows(2)
            .map(|w| (w[0] + 1, w[1].saturating_sub(lead)));
        match t.class {
            TensorClass::Input | TensorClass::Staged => {}
            TensorClass::Weight => {
                // Streamed: away whenever not in use, the wrap from the last use to the next run's
                // first included.
                let mut spans: Vec<(u64, u64)> = gaps.filter(|(a, b)| a < b).collect();
                let (first, last) = (t.uses[0], t.uses[t.uses.len() - 1]);
                if last + 1 < n {
                    spans.push((last + 1, n));
                }
                if first > lead {
                    spans.push((0, first - lead));
                }
                if !spans.is_empty() {
                    out.push(Absence {
                        tensor: i,
                        spans,
                        recompute: None,
                    });
                }
            }
            TensorClass::Output | TensorClass::Intermediate => {
                let producer = rc.producer(i).is_some();
                for (w, (a, b)) in t.uses.windows(2).zip(gaps) {
                    let recompute = (producer && w[0] + 1 < w[1]).then_some((w[0] + 1, w[1]));
                    if a < b || recompute.is_some() {
                        out.push(Absence {
                            tensor: i,
                            spans: if a < b { vec![(a, b)] } else { Vec::new() },
                            recompute,
                        });
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
