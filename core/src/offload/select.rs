//! One score's selection loop, placement and stall prediction (see the parent module doc).

use std::time::Duration;

use super::{
    Absence, Arrival, OffloadDesc, OffloadOp, OffloadTensor, Residency, Score, ScoreOutcome,
    TensorClass,
};
use crate::plan::{self, Buffer, SolveOptions};
use crate::{Error, Result};

/// A placed schedule of one score.
pub(super) struct Placed {
    pub(super) residencies: Vec<Residency>,
    pub(super) host_resident: Vec<bool>,
    pub(super) peak: u64,
    pub(super) algorithm: String,
    pub(super) stall: Duration,
    pub(super) to_device: u64,
    pub(super) to_host: u64,
    pub(super) absences: usize,
}

impl Placed {
    pub(super) fn moved(&self) -> u64 {
        self.to_device + self.to_host
    }

    pub(super) fn outcome(&self, score: Score) -> ScoreOutcome {
        ScoreOutcome {
            score,
            peak: Some(self.peak),
            bytes_to_device: self.to_device,
            bytes_to_host: self.to_host,
            absences: self.absences,
            predicted_stall: self.stall,
        }
    }
}

/// The value of taking an absence over `spans` (steps `[a, b)`) of a tensor of `size` bytes under
/// `score`, given the device load per step now and the load target. Higher is better; ties go to
/// the larger tensor.
pub fn score_value(
    score: Score,
    spans: &[(u64, u64)],
    size: u64,
    load: &[u64],
    target: u64,
) -> f64 {
    let steps = || spans.iter().flat_map(|&(a, b)| a..b);
    let away: u64 = spans.iter().map(|&(a, b)| b - a).sum();
    let peak = load.iter().copied().max().unwrap_or(0).max(1) as f64;
    let at = |t: u64| load.get(t as usize).copied().unwrap_or(0);
    match score {
        Score::Area => size as f64 * away as f64,
        Score::Duration => away as f64,
        Score::SizeWeighted => size as f64 * steps().map(|t| at(t) as f64 / peak).sum::<f64>(),
        Score::Submodular => steps()
            .map(|t| at(t).saturating_sub(target).min(size) as f64)
            .sum(),
    }
}

/// Takes absences by `score` until the placed peak fits the budget (parent module doc).
pub(super) fn run(
    tensors: &[OffloadTensor],
    ops: &[OffloadOp],
    absences: &[Absence],
    desc: &OffloadDesc,
    score: Score,
) -> Result<Placed> {
    let n = ops.len() as u64;
    let mut chosen = vec![false; absences.len()];
    let mut host = vec![false; tensors.len()];
    let mut target = desc.budget;
    loop {
        let res = residencies(tensors, absences, &chosen, &host, n, desc.prefetch_lead);
        let load = load(tensors, &res, n, desc.align);
        let (p, max) = load
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(i, l)| (l, std::cmp::Reverse(i)))
            .unwrap_or((0, 0));
        if max <= target {
            match place(tensors, &res, desc)? {
                Ok((offsets, peak, algorithm)) => {
                    let placed =
                        Placed::new(tensors, ops, desc, res, offsets, host, peak, algorithm);
                    let taken = chosen.iter().filter(|c| **c).count();
                    return Ok(Placed {
                        absences: placed.absences + taken,
                        ..placed
                    });
                }
                Err(best_peak) => {
                    // Fragmentation: the placement needs more than the load; ask for less load.
                    let over = best_peak.saturating_sub(desc.budget).max(desc.align);
                    target = max.saturating_sub(over);
                    continue;
                }
            }
        }
        let spans_peak = |a: &Absence| {
            a.spans
                .iter()
                .any(|&(x, y)| x <= p as u64 && (p as u64) < y)
        };
        let pick = absences
            .iter()
            .enumerate()
            .filter(|(i, a)| !chosen[*i] && !host[a.tensor] && spans_peak(a))
            .map(|(i, a)| {
                let size = tensors[a.tensor].size;
                (i, score_value(score, &a.spans, size, &load, target), size)
            })
            .max_by(|x, y| {
                (x.1, x.2)
                    .partial_cmp(&(y.1, y.2))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        let Some((i, _, _)) = pick else {
            return Err(Error::BudgetBelowWorkingSet {
                step: p,
                op: ops.get(p).map_or_else(String::new, |o| o.label.clone()),
                needed: max,
                budget: desc.budget,
            });
        };
        if desc.unified {
            host[absences[i].tensor] = true;
        } else {
            chosen[i] = true;
        }
    }
}

/// Every tensor's device residency intervals, given the absences taken (offsets not yet placed).
fn residencies(
    tensors: &[OffloadTensor],
    absences: &[Absence],
    chosen: &[bool],
    host: &[bool],
    n: u64,
    lead: u64,
) -> Vec<Residency> {
    let mut away: Vec<Vec<(u64, u64)>> = vec![Vec::new(); tensors.len()];
    for (a, _) in absences.iter().zip(chosen).filter(|(_, c)| **c) {
        away[a.tensor].extend_from_slice(&a.spans);
    }
    let mut out = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let (Some(&first), Some(&last)) = (t.uses.first(), t.uses.last()) else {
            continue;
        };
        if host[i] {
            continue;
        }
        let (lower, upper) = match t.class {
            TensorClass::Weight | TensorClass::Input => (0, n),
            TensorClass::Output => (first, n),
            TensorClass::Intermediate => (first, last + 1),
            TensorClass::Staged => {
                out.push(Residency {
                    tensor: i,
                    lower: first.saturating_sub(lead),
                    upper: last + 1,
                    offset: 0,
                    arrival: Arrival::HostWrite,
                    copy_out: false,
                });
                continue;
            }
        };
        let spans = &mut away[i];
        spans.sort_unstable();
        let streamed = t.class == TensorClass::Weight && !spans.is_empty();
        let mut start = lower;
        let mut pieces = Vec::new();
        for &(a, b) in spans.iter() {
            if a > start {
                pieces.push((start, a));
            }
            start = start.max(b);
        }
        if start < upper {
            pieces.push((start, upper));
        }
        let count = pieces.len();
        for (k, (lo, hi)) in pieces.into_iter().enumerate() {
            let arrival = match (streamed, k) {
                (true, _) => Arrival::Prefetch,
                (false, 0) => Arrival::InPlace,
                (false, _) => Arrival::SwapIn,
            };
            out.push(Residency {
                tensor: i,
                lower: lo,
                upper: hi,
                offset: 0,
                arrival,
                copy_out: !streamed && k + 1 < count,
            });
        }
    }
    out
}

/// Device bytes live at each step.
fn load(tensors: &[OffloadTensor], res: &[Residency], n: u64, align: u64) -> Vec<u64> {
    let mut diff = vec![0i128; n as usize + 1];
    for r in res {
        let s = i128::from(plan::align_up(tensors[r.tensor].size, align));
        diff[r.lower as usize] += s;
        diff[r.upper as usize] -= s;
    }
    let mut acc = 0i128;
    diff[..n as usize]
        .iter()
        .map(|d| {
            acc += d;
            acc as u64
        })
        .collect()
}

/// A placement: offsets, peak, the planner's name.
type Placement = (Vec<u64>, u64, String);

/// Places the residencies under the budget: `Ok(placement)`, or `Err(best peak)` when the planner
/// found no placement within the budget in its time.
fn place(
    tensors: &[OffloadTensor],
    res: &[Residency],
    desc: &OffloadDesc,
) -> Result<std::result::Result<Placement, u64>> {
    if res.is_empty() {
        return Ok(Ok((Vec::new(), 0, "none".into())));
    }
    let buffers: Vec<Buffer> = res
        .iter()
        .map(|r| Buffer {
            lower: r.lower,
            upper: r.upper,
            size: plan::align_up(tensors[r.tensor].size, desc.align),
            align: desc.align,
        })
        .collect();
    let sol = plan::solve(
        &buffers,
        &SolveOptions {
            time_limit: desc.plan_time_limit,
            capacity: Some(desc.budget),
            ..SolveOptions::default()
        },
    )?;
    Ok(match sol.plan {
        Some(p) if p.peak <= desc.budget => Ok((p.offsets, p.peak, sol.algorithm)),
        _ => Err(sol.best_peak),
    })
}

impl Placed {
    /// Fills in offsets, the traffic and the predicted stall.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one placed schedule"
    )]
    fn new(
        tensors: &[OffloadTensor],
        ops: &[OffloadOp],
        desc: &OffloadDesc,
        mut residencies: Vec<Residency>,
        offsets: Vec<u64>,
        host_resident: Vec<bool>,
        peak: u64,
        algorithm: String,
    ) -> Placed {
        for (r, o) in residencies.iter_mut().zip(offsets) {
            r.offset = o;
        }
        let to_device = residencies
            .iter()
            .filter(|r| r.arrival != Arrival::InPlace)
            .map(|r| tensors[r.tensor].size)
            .sum();
        let to_host = residencies
            .iter()
            .filter(|r| r.copy_out)
            .map(|r| tensors[r.tensor].size)
            .sum();
        let stall = predicted_stall(tensors, ops, &residencies, desc);
        let absences = host_resident.iter().filter(|h| **h).count();
        Placed {
            residencies,
            host_resident,
            peak,
            algorithm,
            stall,
            to_device,
            to_host,
            absences,
        }
    }
}

/// The two-lane model: op `k` takes `bytes / device_bandwidth`; copies run one at a time on the
/// transfer lane at `link_bandwidth`, a copy in issued when op `lower` of its residency starts
/// (that op and the ones up to its use overlap it), a copy out when its last op ends. An op waits
/// for every copy in that it binds. Returns the time ops spend waiting.
fn predicted_stall(
    tensors: &[OffloadTensor],
    ops: &[OffloadOp],
    res: &[Residency],
    desc: &OffloadDesc,
) -> Duration {
    let n = ops.len();
    if n == 0 {
        return Duration::ZERO;
    }
    let mut copies_in: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    let mut copies_out: Vec<Vec<f64>> = vec![Vec::new(); n];
    for r in res {
        let t = &tensors[r.tensor];
        let secs = t.size as f64 / desc.link_bandwidth;
        if r.arrival != Arrival::InPlace && (r.lower as usize) < n {
            let first_use = t
                .uses
                .iter()
                .find(|&&u| u >= r.lower)
                .map_or(r.lower, |&u| u);
            copies_in[r.lower as usize].push(((first_use as usize).min(n - 1), secs));
        }
        if r.copy_out && r.upper >= 1 {
            copies_out[r.upper as usize - 1].push(secs);
        }
    }
    let (mut clock, mut lane, mut stall) = (0f64, 0f64, 0f64);
    let mut ready = vec![0f64; n];
    for k in 0..n {
        for &(use_at, secs) in &copies_in[k] {
            lane = lane.max(clock) + secs;
            ready[use_at] = ready[use_at].max(lane);
        }
        let start = clock.max(ready[k]);
        stall += start - clock;
        clock = start + ops[k].bytes as f64 / desc.device_bandwidth;
        for &secs in &copies_out[k] {
            lane = lane.max(clock) + secs;
        }
    }
    Duration::from_secs_f64(stall.max(0.0))
}
