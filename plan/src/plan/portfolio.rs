//! The parallel portfolio: exact provers and heuristic workers run side by side from time zero, in
//! lockstep epochs, so that results are deterministic for a given seed and thread count.
//!
//! Each epoch gives every worker a step of work measured in work units, not time: a prover runs
//! one search with its current node limit, a heuristic worker spends about four placement cost
//! units per node of that limit (without provers, `4 max(n, 4096)` units every epoch: the epochs
//! then only pace the exchange of plans, and short ones bound the time a worker that has reached
//! the lower bound waits for the workers before it). The steps of an epoch run on up to `threads`
//! threads; at the end of the epoch the results are merged in worker order (lowest peak wins, ties
//! to the lower index), the shared bounds are updated and the next epoch starts. A worker that
//! ends the whole run (a plan at the proved lower bound, or a proof that the capacity cannot be
//! met) stops only the workers after it in the order, whose results of that epoch are then
//! discarded; so the outcome is the same whatever the threads' timing. Only the deadline cuts
//! work at a timing-dependent point. The workers are built at their first step, each on its own
//! thread.
//!
//! With a capacity the provers decide it first, then everybody lowers the peak. Without one the
//! provers probe the lower bound first, then bisect between the proved bound and the incumbent.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::time::Instant;

use super::Buffer;
use super::events::Events;
use super::exact::{Event, Prover, first_node_limit};
use super::heuristics::{Heuristics, Incumbent};

/// Instances above this many buffers get one heuristic worker: each worker holds its own
/// occupancy tree, and at a million buffers one tree is a large share of the memory budget.
const PARALLEL_HEURISTICS_MAX_BUFFERS: usize = 250_000;

/// Buffers all heuristic workers together hold at most (each worker's occupancy tree and
/// incumbent take about 150 bytes per buffer, so about 600 MB): an instance of `n` buffers gets
/// at most `HEURISTIC_BUFFERS_IN_MEMORY / n` heuristic workers, whatever the thread count.
const HEURISTIC_BUFFERS_IN_MEMORY: usize = 16 * PARALLEL_HEURISTICS_MAX_BUFFERS;

/// Heuristic placement cost units per prover node in an epoch (a node costs a few placements'
/// time).
const PLACEMENTS_PER_NODE: u64 = 4;

/// What the portfolio is asked to do.
pub(crate) struct Task<'a> {
    pub buffers: &'a [Buffer],
    /// Their sorted lifetime endpoints.
    pub events: &'a Events,
    /// The max-load lower bound.
    pub lower_bound: u64,
    /// Decision form: decide this capacity first.
    pub capacity: Option<u64>,
    /// Whether the exact search is attempted (small enough instance).
    pub exact: bool,
    pub deadline: Instant,
    pub seed: u64,
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Whether the first heuristic worker runs greedy by size, the baseline, before anything
    /// else (see [`Verdict::greedy_peak`]); the caller ran it otherwise.
    pub baseline: bool,
}

/// What the portfolio established.
pub(crate) struct Verdict {
    pub best: Incumbent,
    /// With a capacity: `Some(true)` met, `Some(false)` proved impossible, `None` undecided.
    /// Without one: `Some(true)`.
    pub feasible: Option<bool>,
    /// Why the capacity is impossible, when proved.
    pub infeasible_reason: Option<String>,
    /// Every capacity below this is proved infeasible (at least the lower bound).
    pub proved_bound: u64,
    /// With [`Task::baseline`]: greedy by size's peak, `None` when the deadline cut it.
    pub greedy_peak: Option<u64>,
    /// Search nodes of every exact prover together.
    pub exact_nodes: u64,
}

enum Worker<'a> {
    /// Built on its own thread at its first step, so that the workers' set-up (occupancy trees,
    /// sections, preorders: tens of milliseconds on large instances) runs in parallel.
    Pending(Role),
    Prover(Box<Prover>),
    Heuristic(Box<Heuristics<'a>>),
}

#[derive(Debug, Clone, Copy)]
enum Role {
    Prover { variant: usize, provers: usize },
    Heuristic { variant: usize, baseline: bool },
}

/// One worker's contribution to an epoch.
enum Step {
    Plan(Incumbent),
    Event(Event),
    Nothing,
}

/// Runs the portfolio from the incumbent `start` until the deadline or a decisive result.
/// `report` is called on the coordinating thread with each new incumbent and phase.
pub(crate) fn run(task: &Task<'_>, start: Incumbent, report: &dyn Fn(&str, u64)) -> Verdict {
    let n = task.buffers.len();
    let mut workers = roles(task);
    let mut best = start;
    let mut feasible = match task.capacity {
        Some(cap) => (best.peak <= cap).then_some(true),
        None => Some(true),
    };
    let mut infeasible_reason = None;
    // `proved`: every capacity below it is infeasible. `searched`: the provers' next floor, past
    // probes that were abandoned undecided.
    let mut proved = task.lower_bound;
    let mut searched = task.lower_bound;
    while Instant::now() < task.deadline && best.peak > proved && feasible != Some(false) {
        let must_decide = task.capacity.filter(|&c| best.peak > c);
        let hi = best.peak - 1;
        let nodes = workers
            .iter()
            .find_map(|w| match w {
                Worker::Prover(p) => Some(p.node_limit()),
                Worker::Pending(Role::Prover { .. }) => Some(first_node_limit(n)),
                _ => None,
            })
            .unwrap_or((n as u64).max(4096));
        let budget = nodes.saturating_mul(PLACEMENTS_PER_NODE);
        let end_peak = proved;
        let incumbent = &best;
        let steps = run_epoch(&mut workers, task.threads, |w, stop| {
            match w.built(task, incumbent) {
                Worker::Pending(_) => (Step::Nothing, false),
                Worker::Prover(p) => {
                    let event = p.step(must_decide, searched, hi, task.deadline, stop);
                    let ends = match &event {
                        Event::Found { offsets, .. } => peak_of(task.buffers, offsets) <= end_peak,
                        Event::Proved { capacity, .. } => must_decide == Some(*capacity),
                        _ => false,
                    };
                    (Step::Event(event), ends)
                }
                Worker::Heuristic(h) => {
                    if h.step(budget, end_peak, task.deadline, stop) {
                        let ends = h.best().peak <= end_peak;
                        (Step::Plan(h.best().clone()), ends)
                    } else {
                        (Step::Nothing, false)
                    }
                }
            }
        });
        for step in steps {
            match step {
                Step::Plan(inc) if inc.peak < best.peak => {
                    best = inc;
                    report(&best.algorithm, best.peak);
                }
                Step::Event(Event::Found { offsets, capacity }) => {
                    let peak = peak_of(task.buffers, &offsets);
                    if peak < best.peak {
                        best = Incumbent {
                            offsets,
                            peak,
                            algorithm: format!("exact search (capacity {capacity})"),
                        };
                        report(&best.algorithm, best.peak);
                    }
                }
                Step::Event(Event::Proved { capacity, reason }) => {
                    if must_decide == Some(capacity) {
                        debug_assert!(best.peak > capacity, "a plan exists within the capacity");
                        feasible = Some(false);
                        infeasible_reason = Some(reason.to_string());
                        report("capacity proved infeasible", best.peak);
                    } else {
                        proved = proved.max(capacity + 1);
                        searched = searched.max(proved);
                        report(&format!("proved: no plan within {capacity}"), best.peak);
                    }
                }
                Step::Event(Event::GaveUp { capacity }) => {
                    searched = searched.max(capacity + 1);
                }
                _ => {}
            }
        }
        for w in &mut workers {
            if let Worker::Heuristic(h) = w {
                h.offer(&best);
            }
        }
        if let Some(cap) = task.capacity
            && best.peak <= cap
        {
            feasible = Some(true);
        }
        let heuristic = |w: &Worker<'_>| {
            matches!(
                w,
                Worker::Heuristic(_) | Worker::Pending(Role::Heuristic { .. })
            )
        };
        if searched > hi && !workers.iter().any(heuristic) {
            break;
        }
    }
    let greedy_peak = workers.iter().find_map(|w| match w {
        Worker::Heuristic(h) => h.greedy_peak(),
        _ => None,
    });
    let exact_nodes = workers
        .iter()
        .map(|w| match w {
            Worker::Prover(p) => p.nodes(),
            _ => 0,
        })
        .sum();
    Verdict {
        best,
        feasible,
        infeasible_reason,
        proved_bound: proved,
        greedy_peak,
        exact_nodes,
    }
}

/// The workers for this task, not built yet. While the exact search applies: provers first (one
/// per preorder up to three, two from two threads on, since hard decision instances are the
/// provers' to win), then heuristic workers on the remaining threads, at least one. Otherwise
/// heuristic workers only, the first one running the baseline when [`Task::baseline`] asks.
/// Worker `k` runs on thread `k % threads`.
fn roles<'a>(task: &Task<'a>) -> Vec<Worker<'a>> {
    let n = task.buffers.len();
    let threads = task.threads.max(1);
    let (provers, heuristics) = if task.exact {
        let provers = if threads == 1 { 1 } else { threads.min(3) };
        (provers, threads.saturating_sub(provers).max(1))
    } else if n > PARALLEL_HEURISTICS_MAX_BUFFERS {
        (0, 1)
    } else {
        (
            0,
            threads.min(HEURISTIC_BUFFERS_IN_MEMORY / n.max(1)).max(1),
        )
    };
    let provers = (0..provers).map(|variant| Role::Prover { variant, provers });
    let heuristics = (0..heuristics).map(|variant| Role::Heuristic {
        variant,
        baseline: task.baseline && variant == 0,
    });
    provers.chain(heuristics).map(Worker::Pending).collect()
}

impl<'a> Worker<'a> {
    /// The worker, built first if it is still pending (from the incumbent `start`).
    fn built(&mut self, task: &Task<'a>, start: &Incumbent) -> &mut Self {
        if let Worker::Pending(role) = *self {
            *self = match role {
                Role::Prover { variant, provers } => {
                    Worker::Prover(Box::new(Prover::new(task.buffers, variant, provers)))
                }
                Role::Heuristic { variant, baseline } => {
                    Worker::Heuristic(Box::new(Heuristics::new(
                        task.buffers,
                        task.events,
                        start.clone(),
                        (task.seed, variant),
                        baseline,
                    )))
                }
            };
        }
        self
    }
}

/// Runs `work` on every worker, on up to `threads` threads, and returns the steps in worker
/// order, dropping those of workers after the first one whose step ended the run (`work` returns
/// whether it did; it must poll the stop signal it is given).
fn run_epoch<'a, F>(workers: &mut [Worker<'a>], threads: usize, work: F) -> Vec<Step>
where
    F: Fn(&mut Worker<'a>, &dyn Fn() -> bool) -> (Step, bool) + Sync,
{
    let winner = AtomicUsize::new(usize::MAX);
    let threads = threads.clamp(1, workers.len().max(1));
    let one = |k: usize, w: &mut Worker<'a>| {
        let stop = || winner.load(Ordering::Relaxed) < k;
        let (step, ends) = work(w, &stop);
        if ends {
            winner.fetch_min(k, Ordering::Relaxed);
        }
        (k, step)
    };
    let mut steps: Vec<(usize, Step)> = if threads == 1 {
        workers
            .iter_mut()
            .enumerate()
            .map(|(k, w)| one(k, w))
            .collect()
    } else {
        let mut groups: Vec<Vec<(usize, &mut Worker<'a>)>> =
            (0..threads).map(|_| Vec::new()).collect();
        for (k, w) in workers.iter_mut().enumerate() {
            groups[k % threads].push((k, w));
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| {
                    s.spawn(|| {
                        group
                            .into_iter()
                            .map(|(k, w)| one(k, w))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    // A worker panic is a bug in the planner: surface it, never drop its steps.
                    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
                })
                .collect()
        })
    };
    steps.sort_by_key(|(k, _)| *k);
    let last = winner.load(Ordering::Relaxed);
    steps
        .into_iter()
        .filter(|(k, _)| *k <= last)
        .map(|(_, s)| s)
        .collect()
}

/// The end of the highest-reaching buffer at `offsets` (a plan's peak).
pub(super) fn peak_of(buffers: &[Buffer], offsets: &[u64]) -> u64 {
    buffers
        .iter()
        .zip(offsets)
        .map(|(b, &o)| o + b.size)
        .max()
        .unwrap_or(0)
}
