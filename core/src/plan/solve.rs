//! The planner front door: bound, baseline, heuristic portfolio, exact search, verification.

use std::sync::Arc;
use std::time::Duration;

use crate::time::Instant;

use super::exact::{Outcome, decide};
use super::greedy::greedy_unchecked;
use super::portfolio::{Incumbent, improve};
use super::{Buffer, Plan, lower_bound, validate, verify};
use crate::Result;

/// Largest instance the exact search is attempted on. Beyond it each search node (a sort of the
/// unplaced buffers and a pass over the sections) costs too much to be worth the budget; the
/// heuristic portfolio gets all the time instead.
pub const EXACT_MAX_BUFFERS: usize = 4096;

/// A progress report from a running [`solve`].
#[derive(Debug, Clone)]
pub struct Progress {
    /// Time since `solve` started.
    pub elapsed: Duration,
    /// Lowest peak found so far, in bytes.
    pub best_peak: u64,
    /// The max-load lower bound, in bytes.
    pub lower_bound: u64,
    /// What is running ("heuristics", "exact search at capacity N", ...).
    pub phase: String,
}

/// A progress callback; it must be cheap (it runs on the planning thread).
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Options for [`solve`].
#[derive(Clone)]
pub struct SolveOptions {
    /// Wall-clock budget for the whole call. Default 1 s. Every phase after the baseline checks it
    /// (each heuristic pass every 256 placements, the exact search every 256 nodes), so `solve`
    /// returns within the limit plus the baseline (lower bound, greedy by size: O(n log² n), about
    /// 0.1–3 s at 62k buffers on a loaded machine) plus one final [`verify`] (O(n log n)). The
    /// baseline always completes, so a tiny budget still returns a plan equal to greedy by size.
    pub time_limit: Duration,
    /// Decision form: find a plan with peak <= capacity or prove none exists. `None` (default):
    /// minimise the peak.
    pub capacity: Option<u64>,
    /// Seed of the randomised heuristics (default 0); equal seeds and budgets give equal plans
    /// unless the deadline cuts a search at a different point.
    pub seed: u64,
    /// Called after each improvement and at each phase change. Default none.
    pub progress: Option<ProgressFn>,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            time_limit: Duration::from_secs(1),
            capacity: None,
            seed: 0,
            progress: None,
        }
    }
}

impl std::fmt::Debug for SolveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolveOptions")
            .field("time_limit", &self.time_limit)
            .field("capacity", &self.capacity)
            .field("seed", &self.seed)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// What [`solve`] found.
#[derive(Debug, Clone)]
pub struct Solution {
    /// The best verified plan: within the capacity when one was given (`None` when no plan within
    /// it was found), otherwise the lowest peak found.
    pub plan: Option<Plan>,
    /// Lowest peak of any plan found, in bytes (even one above the capacity).
    pub best_peak: u64,
    /// The max-load lower bound, in bytes.
    pub lower_bound: u64,
    /// Peak of greedy by size, the baseline, in bytes.
    pub greedy_peak: u64,
    /// With a capacity: `Some(true)` a plan fits, `Some(false)` proved that none does, `None`
    /// undecided when time ran out. Without a capacity: `Some(true)`.
    pub feasible: Option<bool>,
    /// Whether the returned peak is proved minimal (it equals the lower bound, or the exact search
    /// proved every smaller capacity infeasible).
    pub proved_optimal: bool,
    /// The heuristic or search that produced the plan.
    pub algorithm: String,
    /// Wall time spent.
    pub elapsed: Duration,
}

/// Plans `buffers`: the greedy baseline, then the heuristic portfolio, then the exact search, all
/// within `opts.time_limit`.
///
/// Never worse than [`super::greedy_by_size`]; every returned plan has passed [`verify`]. With a
/// capacity it stops as soon as a plan fits (or proves that none can: a live set above the capacity,
/// or a completed exact search). Without one it runs the heuristics for a share of the budget
/// (all of it above [`EXACT_MAX_BUFFERS`] buffers), then lowers the peak by decision searches at
/// the lower bound first, then by bisection, until the budget is spent or optimality is proved.
///
/// # Errors
/// The validation errors of [`verify`] for invalid buffers; an internal verification failure is
/// returned, never hidden.
pub fn solve(buffers: &[Buffer], opts: &SolveOptions) -> Result<Solution> {
    let started = Instant::now();
    validate(buffers)?;
    let lb = lower_bound(buffers);
    // The final `verify` is an O(n log n) sweep like the bound's: keep three times the bound's cost
    // in reserve so that it fits in the budget too.
    let reserve = started.elapsed() * 3;
    let deadline = started + opts.time_limit.saturating_sub(reserve);
    let greedy = greedy_unchecked(buffers);
    let greedy_peak = greedy.peak;
    let progress = |phase: String, best: u64| {
        if let Some(p) = &opts.progress {
            p(&Progress {
                elapsed: started.elapsed(),
                best_peak: best,
                lower_bound: lb,
                phase,
            });
        }
    };
    let mut best = Incumbent {
        offsets: greedy.offsets,
        peak: greedy.peak,
        algorithm: "greedy by size".into(),
    };
    let target = opts.capacity.unwrap_or(lb).max(lb);
    let exact_ok = buffers.len() <= EXACT_MAX_BUFFERS;
    let mut feasible = opts.capacity.map(|_| None).unwrap_or(Some(true));
    let mut proved_optimal = best.peak == lb;

    if opts.capacity.is_some_and(|c| lb > c) {
        // A live set exceeds the capacity: proved infeasible without search.
        feasible = Some(false);
    } else if best.peak > target {
        progress("heuristics".into(), best.peak);
        let share = if exact_ok {
            opts.time_limit / 4
        } else {
            opts.time_limit
        };
        let mut report =
            |inc: &Incumbent| progress(format!("heuristics: {}", inc.algorithm), inc.peak);
        best = improve(
            buffers,
            best,
            target,
            (started + share).min(deadline),
            opts.seed,
            &mut report,
        );
        proved_optimal = best.peak == lb;
        if exact_ok && best.peak > target {
            match opts.capacity {
                Some(cap) => {
                    progress(format!("exact search at capacity {cap}"), best.peak);
                    match decide(buffers, cap, deadline) {
                        Outcome::Found(offsets) => {
                            let plan = Plan::from_offsets(buffers, offsets);
                            best = Incumbent {
                                offsets: plan.offsets,
                                peak: plan.peak,
                                algorithm: "exact search".into(),
                            };
                        }
                        Outcome::Infeasible => feasible = Some(false),
                        Outcome::Timeout => {}
                    }
                }
                None => {
                    let (b, optimal) = minimise(buffers, best, lb, deadline, &progress);
                    best = b;
                    proved_optimal = optimal;
                }
            }
        }
    }
    if let Some(cap) = opts.capacity
        && best.peak <= cap
    {
        feasible = Some(true);
    }
    let plan = Plan {
        offsets: best.offsets,
        peak: best.peak,
    };
    verify(buffers, &plan, None)?;
    let fits = opts.capacity.is_none_or(|c| plan.peak <= c);
    Ok(Solution {
        best_peak: plan.peak,
        plan: fits.then_some(plan),
        lower_bound: lb,
        greedy_peak,
        feasible,
        proved_optimal: proved_optimal || (feasible == Some(true) && best.peak == lb),
        algorithm: best.algorithm,
        elapsed: started.elapsed(),
    })
}

/// Lowers the peak with decision searches: at the lower bound first (perfect packings are common
/// and cheapest to confirm), then by bisection on `[lo, best - 1]`. Each probe gets half of the
/// remaining time. Returns the incumbent and whether it is proved optimal.
fn minimise(
    buffers: &[Buffer],
    mut best: Incumbent,
    lb: u64,
    deadline: Instant,
    progress: &dyn Fn(String, u64),
) -> (Incumbent, bool) {
    let (mut lo, mut hi) = (lb, best.peak - 1);
    let mut undecided = false;
    let mut first = true;
    while lo <= hi {
        let now = Instant::now();
        if now >= deadline {
            return (best, false);
        }
        let mid = if first { lo } else { lo + (hi - lo) / 2 };
        first = false;
        progress(format!("exact search at capacity {mid}"), best.peak);
        match decide(buffers, mid, now + (deadline - now) / 2) {
            Outcome::Found(offsets) => {
                let plan = Plan::from_offsets(buffers, offsets);
                hi = plan.peak.min(mid) - 1;
                best = Incumbent {
                    offsets: plan.offsets,
                    peak: plan.peak,
                    algorithm: "exact search".into(),
                };
                progress("exact search: improved".into(), best.peak);
                if best.peak == lb {
                    return (best, true);
                }
            }
            Outcome::Infeasible => lo = mid + 1,
            Outcome::Timeout => {
                undecided = true;
                lo = mid + 1;
            }
        }
    }
    (best, !undecided)
}
