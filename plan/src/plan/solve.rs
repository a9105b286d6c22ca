//! The planner front door: bound, baselines, the parallel portfolio, verification.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::time::Instant;

use super::exact::Infeasibility;
use super::first::first_plan;
use super::greedy::{Fit, Squeezer, size_order};
use super::heuristics::Incumbent;
use super::portfolio::{self, Task};
use super::verify::verify_sorted;
use super::{Buffer, Plan, validate};
use crate::Result;

/// Largest instance the exact search is attempted on. Beyond it each search node (a sort of the
/// unplaced buffers and a pass over the sections) costs too much to be worth the budget; the
/// heuristic portfolio gets all the time instead.
pub const EXACT_MAX_BUFFERS: usize = 4096;

/// The verifier's cost per endpoint before it is measured, in units of validation's (one radix sort
/// of the endpoints and the passes over them), a little above what a million random buffers
/// take (its data gathered in chunks, then an ordered map of the live buffers;
/// `docs/decisions/planner-tuning.md`).
const VERIFY_UNITS: f64 = 1.5;

/// Share of the time limit held back for the portfolio's workers to notice the deadline and be
/// joined, and for the first plan's estimates to be off (1/100: 10 ms of a 1 s limit). A worker
/// polls the deadline every few hundred placements, so on a loaded machine it ends a few
/// milliseconds past it.
const JOIN_SHARE: u32 = 100;

/// Most portfolio threads [`solve`] accepts: every thread runs its own workers, each holding
/// occupancy trees of the instance's size, so a count far above any machine's cores only costs
/// memory.
pub const MAX_THREADS: usize = 1024;

/// The cores the system reports, at most [`MAX_THREADS`], asked once per process: on Linux the
/// answer reads the cgroup's files, about twenty system calls that a replay pool planning a small
/// step at every new shape would pay each time.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism().map_or(1, |t| t.get().min(MAX_THREADS))
    })
}

/// The portfolio threads a solve runs for `requested` threads (0: every core): never more than
/// the cores the system reports. Threads beyond the cores only take turns on them, while each
/// adds a worker (its own occupancy tree, about 150 bytes per buffer) and its share of the join
/// at the deadline, so memory and the deadline's overrun would grow with the count for nothing.
pub fn portfolio_threads(requested: usize) -> usize {
    match requested {
        0 => cores(),
        t => t.min(cores()),
    }
}

/// Smallest instance whose endpoints are sorted and whose first plan is verified on more threads
/// than one (with two threads or more), and the least share of the buffers each sorting thread
/// takes: below it the work takes less time than starting a thread is worth.
const PARALLEL_CHECK_MIN_BUFFERS: usize = 1 << 14;

/// Time, in the same units, that a step which cannot stop midway (sorting the buffers, building an
/// occupancy tree) must have left before it starts.
const SETUP_UNITS: u32 = 6;

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
    /// Wall-clock budget for the whole call, a promise at every scale. Default 1 s. Every phase
    /// checks it (the first plan, sweep-line good fit, every 1024 endpoints, stacking the rest of
    /// the buffers in O(n) when it passes; greedy by size and each heuristic pass every 256
    /// placements; the exact search every 256 nodes); steps that cannot stop midway only start
    /// when several times their cost is left; the final [`verify`](fn@super::verify) is reserved for up front. What
    /// always runs is O(n) or a sweep: validation with one radix sort of the endpoints, the lower
    /// bound, a first plan in size-class slabs checked as it is placed (together 0.10–0.19 s for
    /// a million random buffers on two idle cores, 0.17–0.18 s on one, 0.2–0.3 s with two other
    /// busy threads on two cores), so a limit below that is exceeded by it.
    pub time_limit: Duration,
    /// Decision form: decide first whether a plan with peak <= capacity exists (find one or prove
    /// none does), then lower the peak further within the time limit. `None` (default): minimise
    /// the peak.
    pub capacity: Option<u64>,
    /// Seed of the randomised heuristics (default 0). Equal instances, seeds, thread counts and
    /// limits give equal results unless the deadline cuts the work at a different point.
    pub seed: u64,
    /// Worker threads of the portfolio, at most [`MAX_THREADS`]; 0 (default) = every core the
    /// system reports. Counts above the cores run as many threads as there are cores
    /// ([`portfolio_threads`]), so a count gives the same result on every machine with at least
    /// that many cores. More threads
    /// run more provers (up to three preorders) and heuristic workers side by side; the result
    /// depends on the count, never on the threads' timing (see `portfolio`).
    pub threads: usize,
    /// Called after each improvement and at each phase change. Default none.
    pub progress: Option<ProgressFn>,
    /// Whether greedy by size runs when the first plan already meets the lower bound, for
    /// [`Solution::greedy_peak`] alone (default true). A caller that plans at run time and
    /// reads only the plan (record and replay) turns it off, which saves the replay pool a few
    /// percent of its time per pair.
    pub baseline: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            time_limit: Duration::from_secs(1),
            capacity: None,
            seed: 0,
            threads: 0,
            progress: None,
            baseline: true,
        }
    }
}

impl std::fmt::Debug for SolveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolveOptions")
            .field("time_limit", &self.time_limit)
            .field("capacity", &self.capacity)
            .field("seed", &self.seed)
            .field("threads", &self.threads)
            .field("progress", &self.progress.is_some())
            .field("baseline", &self.baseline)
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
    /// Peak of greedy by size, the baseline, in bytes. When the time limit stopped greedy before
    /// it finished (`greedy_finished` false: very large inputs under a short limit), the peak of
    /// the sweep-line good-fit plan that stood in for it.
    pub greedy_peak: u64,
    /// Whether greedy by size ran to completion within the time limit.
    pub greedy_finished: bool,
    /// Three states. With a capacity: `Some(true)` a plan fits, `Some(false)` proved that none
    /// does (see `infeasible_reason`), `None` undecided when time ran out. Without a capacity:
    /// `Some(true)`.
    pub feasible: Option<bool>,
    /// Why no plan fits the capacity, when `feasible` is `Some(false)`.
    pub infeasible_reason: Option<String>,
    /// Whether the returned peak is proved minimal (it equals the lower bound, or the exact search
    /// proved every smaller capacity infeasible).
    pub proved_optimal: bool,
    /// The heuristic or search that produced the plan.
    pub algorithm: String,
    /// Portfolio threads used.
    pub threads: usize,
    /// Nodes the exact search visited, over every prover and run (0 when it did not run): a
    /// measure of the search's work that, unlike time, does not depend on the machine's load.
    pub exact_nodes: u64,
    /// Wall time spent.
    pub elapsed: Duration,
    /// Where that time went.
    pub stages: Stages,
}

/// The wall time of each stage of [`solve`], in order; together they make up
/// [`Solution::elapsed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stages {
    /// Checking the buffers, sorting their endpoints, the lower bound.
    pub validation: Duration,
    /// The first plan (sweep-line good fit, its rest in slabs when cut, or slabs alone if lower)
    /// and its verification, which runs beside it.
    pub first_plan: Duration,
    /// Greedy by size and the portfolio.
    pub search: Duration,
    /// Verifying a plan that beat the first one.
    pub final_verification: Duration,
}

/// Plans `buffers`: a first plan (sweep-line good fit), greedy by size as the baseline, then the
/// portfolio (exact provers and heuristic workers in parallel), all within `opts.time_limit`.
/// On instances above [`EXACT_MAX_BUFFERS`] buffers the portfolio's first heuristic worker runs
/// the baseline beside the others instead of before them.
///
/// Never worse than [`super::greedy_by_size`] when that finishes within the limit; every returned
/// plan has passed [`verify`](fn@super::verify). Stops early when the peak reaches the lower bound, when a capacity
/// is proved infeasible (a live set above it, or an exhausted exact search), or when the exact
/// search proves every smaller peak infeasible. The exact search runs on instances of at most
/// [`EXACT_MAX_BUFFERS`] buffers.
///
/// # Errors
/// The validation errors of [`verify`](fn@super::verify) for invalid buffers, [`crate::Error::PlanTooLarge`] when
/// offsets could overflow `u64`, [`crate::ArgumentError::TooMany`] for more than [`MAX_THREADS`]
/// threads; an internal verification failure is returned, never hidden.
pub fn solve(buffers: &[Buffer], opts: &SolveOptions) -> Result<Solution> {
    let started = Instant::now();
    if opts.threads > MAX_THREADS {
        return Err(crate::ArgumentError::too_many(
            "portfolio threads (0 = every core)",
            opts.threads as u64,
            MAX_THREADS as u64,
        )
        .into());
    }
    let threads = portfolio_threads(opts.threads);
    let parallel = threads > 1 && buffers.len() >= PARALLEL_CHECK_MIN_BUFFERS;
    let sorters = threads
        .min(buffers.len() / PARALLEL_CHECK_MIN_BUFFERS)
        .max(1);
    let (events, padded_worst) = validate(buffers, sorters)?;
    let (lb, lb_time) = events.peak_load();
    // `unit`: what an O(n) pass over the endpoints costs on this machine right now (the radix sort
    // and the passes above). Steps that cannot stop midway (a sort, an occupancy tree) only start
    // when enough units are left, and it is the first plan's prior cost.
    let unit = started.elapsed();
    let mut stages = Stages {
        validation: unit,
        ..Stages::default()
    };
    let end = later(
        started,
        opts.time_limit.saturating_sub(opts.time_limit / JOIN_SHARE),
    );
    let progress = |phase: &str, best: u64| {
        if let Some(p) = &opts.progress {
            p(&Progress {
                elapsed: started.elapsed(),
                best_peak: best,
                lower_bound: lb,
                phase: phase.to_string(),
            });
        }
    };
    let per_endpoint = unit.as_secs_f64() / (2 * buffers.len()).max(1) as f64;
    let prior = (per_endpoint, per_endpoint * VERIFY_UNITS);
    let first = first_plan(buffers, &events, padded_worst, end, prior, parallel)
        .map_err(|fault| fault.into_error(buffers, &|i| i.to_string()))?;
    stages.first_plan = started.elapsed() - stages.validation;
    let sweep = first.sweep;
    let sweep_peak = sweep.plan.peak;
    let mut best = Incumbent {
        algorithm: sweep.describe(),
        offsets: sweep.plan.offsets,
        peak: sweep.plan.peak,
    };
    let verified = best.offsets.clone();
    // Later plans are verified at the end, in about the time the first one's check took.
    let deadline = end.checked_sub(first.check_time).unwrap_or(started);
    let left = || deadline.saturating_duration_since(Instant::now());
    let load_too_high = opts.capacity.is_some_and(|c| lb > c);
    // Large instances bound for the portfolio run greedy there, on its first heuristic worker,
    // beside the other workers instead of before all of them (0.16–0.7 s on PanGu-2.6B under
    // load). Small ones run it here: it is cheap, and a prover that ends the run could cut it
    // short in the portfolio.
    let delegate = buffers.len() > EXACT_MAX_BUFFERS
        && best.peak > lb
        && !load_too_high
        && left() >= unit * SETUP_UNITS;
    // Kept until the end: freeing a large occupancy tree (on a background thread) would compete
    // with the final verification.
    let mut squeezer = None;
    // Greedy by size's peak once it has run to the end.
    let mut greedy = None;
    let settled = best.peak <= lb && !opts.baseline;
    if !delegate && !settled && left() >= unit * SETUP_UNITS {
        let order = size_order(buffers);
        let placed = squeezer
            .insert(Squeezer::with_events(buffers, &events))
            .place(&order, Fit::Best, u64::MAX, Some(deadline));
        if let Ok((offsets, peak)) = placed {
            if peak <= best.peak {
                best = Incumbent {
                    offsets,
                    peak,
                    algorithm: "greedy by size".into(),
                };
            }
            greedy = Some(peak);
        }
        progress("baseline", best.peak);
    }
    let mut feasible = opts
        .capacity
        .map_or(Some(true), |c| (best.peak <= c).then_some(true));
    let mut infeasible_reason = None;
    let mut proved_bound = lb;
    let mut exact_nodes = 0;
    if load_too_high {
        // A live set exceeds the capacity: proved infeasible without search.
        feasible = Some(false);
        let live = buffers
            .iter()
            .filter(|b| b.lower <= lb_time && lb_time < b.upper)
            .count();
        infeasible_reason = Some(
            Infeasibility::Load {
                time: lb_time,
                load: lb,
                buffers: live,
            }
            .to_string(),
        );
    } else if delegate || (best.peak > lb && left() >= unit * SETUP_UNITS) {
        let task = Task {
            buffers,
            events: &events,
            lower_bound: lb,
            capacity: opts.capacity,
            exact: buffers.len() <= EXACT_MAX_BUFFERS,
            deadline,
            seed: opts.seed,
            threads,
            baseline: delegate,
        };
        let verdict = portfolio::run(&task, best, &progress);
        best = verdict.best;
        feasible = verdict.feasible;
        infeasible_reason = verdict.infeasible_reason;
        proved_bound = verdict.proved_bound;
        exact_nodes = verdict.exact_nodes;
        if delegate {
            greedy = verdict.greedy_peak;
        }
    }
    stages.search = started.elapsed() - stages.validation - stages.first_plan;
    let plan = Plan {
        offsets: best.offsets,
        peak: best.peak,
    };
    if plan.offsets != verified {
        verify_sorted(buffers, &events, &plan, None, parallel)
            .map_err(|fault| fault.into_error(buffers, &|i| i.to_string()))?;
    }
    let elapsed = started.elapsed();
    stages.final_verification = elapsed - stages.validation - stages.first_plan - stages.search;
    let fits = opts.capacity.is_none_or(|c| plan.peak <= c);
    let solution = Ok(Solution {
        best_peak: plan.peak,
        plan: fits.then_some(plan),
        lower_bound: lb,
        greedy_peak: greedy.unwrap_or(sweep_peak),
        greedy_finished: greedy.is_some(),
        feasible,
        infeasible_reason,
        proved_optimal: best.peak <= proved_bound,
        algorithm: best.algorithm,
        threads,
        exact_nodes,
        elapsed,
        stages,
    });
    drop(squeezer);
    solution
}

/// `start + after`, or a year after `start` when that is not representable (a limit of
/// `Duration::MAX` means no limit, not a panic).
fn later(start: Instant, after: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    start
        .checked_add(after)
        .or_else(|| start.checked_add(YEAR))
        .unwrap_or(start)
}
