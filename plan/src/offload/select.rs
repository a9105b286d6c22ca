//! One score's selection loop, placement and stall prediction (see the parent module doc).

use std::time::Duration;

use super::recompute::{self, Recomputable, Way};
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
    pub(super) recomputed: u64,
    pub(super) recompute_work: u64,
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
            bytes_recomputed: self.recomputed,
            recompute_work: self.recompute_work,
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

/// The graph as the selection sees it: tensors, ops, and which tensors can be re-run.
pub(super) type Input<'a> = (&'a [OffloadTensor], &'a [OffloadOp], &'a Recomputable);

/// Takes absences by `score` until the placed peak fits the budget (parent module doc).
pub(super) fn run(
    input: Input<'_>,
    absences: &[Absence],
    desc: &OffloadDesc,
    score: Score,
) -> Result<Placed> {
    let (tensors, ops, rc) = input;
    let n = ops.len() as u64;
    // Per absence: how it was taken, with the chain a recompute re-runs first (recompute module
    // doc; empty for a swap).
    let mut chosen: Vec<Option<(Way, Vec<usize>)>> = vec![None; absences.len()];
    let mut host = vec![false; tensors.len()];
    let mut target = desc.budget;
    loop {
        let mut res = residencies(input, absences, &chosen, &host, desc.prefetch_lead);
        res.extend(recompute::transients(recomputes(absences, &chosen), rc));
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
                    let taken = chosen.iter().filter(|c| c.is_some()).count();
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
        let covers = |spans: &[(u64, u64)], s: u64| spans.iter().any(|&(x, y)| x <= s && s < y);
        let pins = recompute::pins(tensors.len(), recomputes(absences, &chosen), rc);
        let pick = absences
            .iter()
            .enumerate()
            .filter(|(i, a)| chosen[*i].is_none() && !host[a.tensor])
            .filter_map(|(i, a)| {
                let (way, chain) =
                    recompute::way(a.tensor, &a.spans, a.recompute, input, &res, desc)?;
                let spans = match (way, a.recompute) {
                    (Way::Recompute, Some(r)) => vec![r],
                    _ => a.spans.clone(),
                };
                let pinned = pins[a.tensor].iter().any(|&s| covers(&spans, s));
                if !covers(&spans, p as u64) || pinned {
                    return None;
                }
                let size = tensors[a.tensor].size;
                let value = score_value(score, &spans, size, &load, target);
                Some((i, (way, chain), value, size))
            })
            .max_by(|x, y| {
                (x.2, x.3)
                    .partial_cmp(&(y.2, y.3))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        let Some((i, (way, chain), _, _)) = pick else {
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
            chosen[i] = Some((way, chain));
        }
    }
}

/// The chosen recomputes: `(tensor, step, chain)`.
fn recomputes<'a>(
    absences: &'a [Absence],
    chosen: &'a [Option<(Way, Vec<usize>)>],
) -> impl Iterator<Item = (usize, u64, &'a [usize])> {
    absences
        .iter()
        .zip(chosen)
        .filter_map(|(a, c)| match (c, a.recompute) {
            (Some((Way::Recompute, chain)), Some((_, at))) => Some((a.tensor, at, &chain[..])),
            _ => None,
        })
}

/// Every tensor's device residency intervals, given the absences taken (offsets not yet placed;
/// the chains' transient residencies are added by the caller).
fn residencies(
    (tensors, ops, rc): Input<'_>,
    absences: &[Absence],
    chosen: &[Option<(Way, Vec<usize>)>],
    host: &[bool],
    lead: u64,
) -> Vec<Residency> {
    let n = ops.len() as u64;
    let mut away: Vec<Vec<(u64, u64, Way)>> = vec![Vec::new(); tensors.len()];
    for (a, way) in absences.iter().zip(chosen) {
        let way = way.as_ref().map(|c| c.0);
        match (way, a.recompute) {
            (Some(Way::Recompute), Some((from, at))) => {
                away[a.tensor].push((from, at, Way::Recompute))
            }
            (Some(_), _) => away[a.tensor].extend(a.spans.iter().map(|&(x, y)| (x, y, Way::Swap))),
            (None, _) => {}
        }
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
        spans.sort_unstable_by_key(|s| (s.0, s.1));
        let streamed = t.class == TensorClass::Weight && !spans.is_empty();
        let producer = rc.producer(i).map(|p| p.op);
        let mut start = lower;
        let mut arrival = if streamed {
            Arrival::Prefetch
        } else {
            Arrival::InPlace
        };
        let mut pieces = Vec::new();
        for &(a, b, way) in spans.iter() {
            if a > start {
                pieces.push((start, a, arrival));
            }
            if !streamed {
                arrival = recompute::arrival_after(way, producer);
            }
            start = start.max(b);
        }
        if start < upper {
            pieces.push((start, upper, arrival));
        }
        for (k, &(lo, hi, arrival)) in pieces.iter().enumerate() {
            let next = pieces.get(k + 1).map(|p| p.2);
            out.push(Residency {
                tensor: i,
                lower: lo,
                upper: hi,
                offset: 0,
                arrival,
                copy_out: next == Some(Arrival::SwapIn),
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
        let copied =
            |r: &&Residency| !matches!(r.arrival, Arrival::InPlace | Arrival::Recompute { .. });
        let to_device = residencies
            .iter()
            .filter(copied)
            .map(|r| tensors[r.tensor].size)
            .sum();
        let (mut recomputed, mut recompute_work) = (0, 0);
        for r in &residencies {
            if let Arrival::Recompute { op } = r.arrival {
                recomputed += tensors[r.tensor].size;
                recompute_work += ops.get(op as usize).map_or(0, |o| o.bytes);
            }
        }
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
            recomputed,
            recompute_work,
        }
    }
}

/// The two-lane model: op `k` takes `bytes / device_bandwidth`; copies run one at a time on the
/// transfer lane at `link_bandwidth`, a copy in issued when op `lower` of its residency starts
/// (that op and the ones up to its use overlap it), a copy out when its last op ends. An op waits
/// for every copy in that it binds; the producers re-run before op `k` take their own time on
/// the compute lane first. Returns the time ops spend waiting plus the re-runs' time.
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
    let mut rerun = vec![0f64; n];
    for r in res {
        let t = &tensors[r.tensor];
        let secs = t.size as f64 / desc.link_bandwidth;
        if let (Arrival::Recompute { op }, Some(slot)) =
            (r.arrival, rerun.get_mut(r.lower as usize))
        {
            *slot += ops
                .get(op as usize)
                .map_or(0.0, |o| recompute::recompute_seconds(o, desc));
        } else if r.arrival != Arrival::InPlace && (r.lower as usize) < n {
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
        clock += rerun[k];
        stall += rerun[k];
        let start = clock.max(ready[k]);
        stall += start - clock;
        clock = start + ops[k].bytes as f64 / desc.device_bandwidth;
        for &secs in &copies_out[k] {
            lane = lane.max(clock) + secs;
        }
    }
    Duration::from_secs_f64(stall.max(0.0))
}
