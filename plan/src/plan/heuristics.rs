//! The heuristic worker of the portfolio: many orderings squeezed two ways, then a randomised local
//! search on the best ordering, resumable in steps of a placement budget.
//!
//! Orderings (each squeezed with best fit and with lowest offset, XLA's `CreateHeapWithPackingSearch`
//! idea): size (TFLite, XLA spatial; also with start-time ties), lifetime length (XLA temporal),
//! area (XLA spatial×temporal), heaviest section touched (MiniMalloc's "T": buffers where memory is
//! tightest first; ties by lifetime, start time or size), end time and start time. Each pass is cut
//! off as soon as it exceeds the incumbent and checks the deadline. Then the incumbent order is
//! perturbed and squeezed again with the incumbent peak as a cutoff (idealloc's "abort once the peak
//! exceeds the best so far"): the buffer that broke the cutoff moves earlier (it is a bottleneck),
//! plus a few random swaps; an equal peak is accepted so the search drifts across plateaus.
//! Interleaved with both (odd variants after their first ordering, three quarters of their work
//! counted in placement cost units; every variant in the local search), the peak descent
//! ([`super::descent`]) re-packs from the best plan itself, closing the holes at the fullest step
//! that no ordering removes; the portfolio hands it other workers' better plans at each epoch.
//!
//! On large instances the portfolio's first worker runs greedy by size, the baseline, before all
//! that, after its cheaper lowest-fit twin (see [`Heuristics::greedy_peak`]).
//!
//! The worker only reads its own state, so the plans it produces depend on the seed, its variant
//! and the budgets it is given, never on timing (except a deadline cut).

use crate::time::Instant;
use std::cmp::Reverse;

use super::Buffer;
use super::bound::max_load_over_life;
use super::descent::Descent;
use super::events::Events;
use super::greedy::{Fit, Squeezer, Stop, order_by, size_order};
use super::rng::Rng;

/// The best placement found so far.
#[derive(Debug, Clone)]
pub(crate) struct Incumbent {
    /// Offsets in input order.
    pub offsets: Vec<u64>,
    /// `max(offset + size)`.
    pub peak: u64,
    /// Which heuristic produced it.
    pub algorithm: String,
}

/// The buffer orderings of the first phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    PressureLife,
    SizeStart,
    PressureStart,
    Size,
    Lifetime,
    Area,
    PressureSize,
    End,
    Start,
}

/// Most promising first on the SOMAS and IOPDDL traces (`docs/decisions/planner-tuning.md`):
/// size with start-time ties (equal sizes are common and TFLite's lifetime tie-break scatters
/// them; best fit first: it is the odd variants' start for peak descent, while the
/// lowest-offset plan, as low and a third of the cost, is a fixed point of the walk's
/// compaction), the pressure orders that stack the heaviest sections first. Size + best fit is
/// the baseline itself, so it is not repeated.
const RUNS: [(&str, Key, Fit); 17] = [
    ("heaviest section, lifetime", Key::PressureLife, Fit::Best),
    ("size, start time", Key::SizeStart, Fit::Best),
    ("size, start time", Key::SizeStart, Fit::Lowest),
    (
        "heaviest section, start time",
        Key::PressureStart,
        Fit::Best,
    ),
    ("size", Key::Size, Fit::Lowest),
    ("lifetime", Key::Lifetime, Fit::Best),
    ("area", Key::Area, Fit::Best),
    ("heaviest section", Key::PressureSize, Fit::Best),
    ("end time", Key::End, Fit::Best),
    ("start time", Key::Start, Fit::Best),
    ("heaviest section, lifetime", Key::PressureLife, Fit::Lowest),
    (
        "heaviest section, start time",
        Key::PressureStart,
        Fit::Lowest,
    ),
    ("lifetime", Key::Lifetime, Fit::Lowest),
    ("area", Key::Area, Fit::Lowest),
    ("heaviest section", Key::PressureSize, Fit::Lowest),
    ("end time", Key::End, Fit::Lowest),
    ("start time", Key::Start, Fit::Lowest),
];

/// One heuristic worker; see the module docs.
pub(crate) struct Heuristics<'a> {
    buffers: &'a [Buffer],
    /// Their sorted endpoints, for the descent walk built after greedy (see [`Self::build_descent`]).
    events: &'a Events,
    squeezer: Squeezer<'a>,
    /// Heaviest section load over each buffer's life, computed on first use.
    heaviest: Option<Vec<u64>>,
    /// Index into [`RUNS`] of the next ordering to try (rotated by the variant).
    next_run: usize,
    variant: usize,
    best: Incumbent,
    /// The ordering and fit of the incumbent, once the first phase produced one.
    order: Option<(Vec<u32>, Fit)>,
    candidate: Vec<u32>,
    rng: Rng,
    /// The seed of `rng`, also the descent walk's.
    seed: u64,
    rounds: u64,
    /// When set, `candidate` already holds a proposal (a bottleneck moved earlier) to evaluate.
    pending: bool,
    /// The peak-descent walk, alternating with the order perturbations (`None` above
    /// [`DESCENT_MAX_BUFFERS`], and in the baseline worker until greedy by size has finished).
    descent: Option<Descent<'a>>,
    /// Cost units spent on orderings and on descent rounds in the first phase, to interleave
    /// them (see [`DESCENT_SHARE`]).
    ordering_spent: u64,
    descent_spent: u64,
    /// Greedy by size, when this worker runs it before anything else.
    baseline: Baseline,
}

/// Greedy by size run by a worker (the portfolio's first heuristic worker on large instances, so
/// that the baseline runs beside the other workers instead of before all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Baseline {
    /// Not this worker's job.
    Elsewhere,
    Pending,
    /// Finished with this peak.
    Finished(u64),
    /// The deadline cut it.
    Cut,
}

/// Placement cost units per buffer of each fit rule, for the budgets that keep workers in step: a
/// best-fit placement scans every gap that fits, a lowest-fit one stops at the first (a third
/// to a half of the cost).
fn cost(fit: Fit) -> u64 {
    match fit {
        Fit::Best => 2,
        Fit::Lowest => 1,
    }
}

/// Largest instance that gets a peak-descent walk: it keeps a second occupancy tree, and each of
/// its rounds scans every buffer a few times.
const DESCENT_MAX_BUFFERS: usize = 100_000;

/// An odd variant gives `DESCENT_SHARE - 1` times the work of its orderings to descent rounds in
/// its first phase, counted in cost units: counted in steps, a best-fit ordering (0.2–0.4 s on
/// PanGu-2.6B under load) took as long as two rounds.
const DESCENT_SHARE: u64 = 4;

impl<'a> Heuristics<'a> {
    /// A worker starting from `start`. Variant `k` starts the orderings at the `k`-th one and
    /// seeds its local search with `seed + k`, so parallel workers explore differently. With
    /// `baseline`, its first step runs greedy by size (see [`Self::greedy_peak`]).
    pub fn new(
        buffers: &'a [Buffer],
        events: &'a Events,
        start: Incumbent,
        (seed, variant): (u64, usize),
        baseline: bool,
    ) -> Self {
        let mut worker = Heuristics {
            buffers,
            events,
            squeezer: Squeezer::with_events(buffers, events),
            heaviest: None,
            next_run: 0,
            variant,
            best: start,
            order: None,
            candidate: Vec::new(),
            rng: Rng::new(seed.wrapping_add(variant as u64)),
            seed: seed.wrapping_add(variant as u64),
            rounds: 0,
            pending: false,
            descent: None,
            ordering_spent: 0,
            descent_spent: 0,
            baseline: if baseline {
                Baseline::Pending
            } else {
                Baseline::Elsewhere
            },
        };
        if !baseline {
            worker.build_descent();
        }
        worker
    }

    /// Builds the peak-descent walk from the best plan so far (nothing above
    /// [`DESCENT_MAX_BUFFERS`]). The baseline worker builds it only once greedy by size has
    /// finished: under a short limit on a loaded machine (IOPDDL S_1, 1 s, two CPU hogs) the
    /// walk's occupancy tree and order, built first, pushed greedy past the deadline.
    fn build_descent(&mut self) {
        let (buffers, events) = (self.buffers, self.events);
        self.descent = (buffers.len() <= DESCENT_MAX_BUFFERS).then(|| {
            Descent::new(
                buffers,
                events,
                events.peak_load().1,
                &self.best.offsets,
                self.best.peak,
                self.seed,
            )
        });
    }

    /// Greedy by size's peak, once this worker has run it to the end.
    pub fn greedy_peak(&self) -> Option<u64> {
        match self.baseline {
            Baseline::Finished(peak) => Some(peak),
            _ => None,
        }
    }

    /// The worker's best placement.
    pub fn best(&self) -> &Incumbent {
        &self.best
    }

    /// Works until about `budget` placement cost units (see [`cost`]) are spent, the peak reaches
    /// `target`, the deadline passes or `stop` returns true. Returns whether the best placement
    /// improved.
    pub fn step(
        &mut self,
        budget: u64,
        target: u64,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
    ) -> bool {
        let n = self.buffers.len();
        let start_peak = self.best.peak;
        let mut spent = 0u64;
        if n < 2 {
            return false;
        }
        if self.baseline == Baseline::Pending && !stop() {
            spent += self.run_baseline(deadline);
        }
        while spent < budget && self.best.peak > target && Instant::now() < deadline && !stop() {
            // Odd variants give three quarters of their work to peak descent once their first
            // ordering has produced a plan (see `descent`: it needs a good plan, then many rounds).
            if self.variant % 2 == 1
                && (1..RUNS.len()).contains(&self.next_run)
                && self.descending()
                && self.descent_spent < (DESCENT_SHARE - 1) * self.ordering_spent
            {
                let units = self.descent_round(deadline);
                spent += units;
                self.descent_spent += units;
                continue;
            }
            if self.next_run < RUNS.len() {
                let (name, key, fit) = RUNS[(self.next_run + self.variant) % RUNS.len()];
                self.next_run += 1;
                if self.baseline != Baseline::Elsewhere && (key, fit) == (Key::Size, Fit::Lowest) {
                    // The baseline's lowest-fit twin ran it already.
                    continue;
                }
                let order = self.order(key);
                // A cutoff of `peak` (not `peak - 1`) keeps ties, so a good order is kept.
                match self
                    .squeezer
                    .place(&order, fit, self.best.peak, Some(deadline))
                {
                    Ok((offsets, peak)) => {
                        spent += n as u64 * cost(fit);
                        self.ordering_spent += n as u64 * cost(fit);
                        if peak < self.best.peak || self.order.is_none() {
                            let fit_name = match fit {
                                Fit::Best => "best fit",
                                Fit::Lowest => "lowest offset",
                            };
                            self.best = Incumbent {
                                offsets,
                                peak,
                                algorithm: format!("{name} order, {fit_name}"),
                            };
                        }
                        if peak <= self.best.peak {
                            self.order = Some((order, fit));
                        }
                    }
                    Err(Stop::Cutoff(k)) => {
                        spent += (k as u64 + 1) * cost(fit);
                        self.ordering_spent += (k as u64 + 1) * cost(fit);
                    }
                    Err(Stop::Deadline) => break,
                }
                continue;
            }
            spent += if self.rounds % 2 == 1 && self.descending() {
                self.descent_round(deadline)
            } else {
                self.local_search_round(deadline)
            };
        }
        self.best.peak < start_peak
    }

    /// Greedy by size, the baseline, preceded by its lowest-fit twin; returns the cost units spent.
    ///
    /// The lowest fit costs a third to a half of the best fit and lands within a few tenths of a
    /// percent of it, so when the deadline cuts the baseline (a short limit on a loaded machine,
    /// or a large instance) the answer is still a greedy plan, not the sweep's, which is far
    /// higher (`docs/decisions/planner-tuning.md`). The walk of
    /// peak descent is built after both, from their plan (see [`Self::build_descent`]).
    fn run_baseline(&mut self, deadline: Instant) -> u64 {
        let n = self.buffers.len() as u64;
        let order = size_order(self.buffers);
        let mut spent = 0;
        match self
            .squeezer
            .place(&order, Fit::Lowest, self.best.peak, Some(deadline))
        {
            Ok((offsets, peak)) => {
                spent += n * cost(Fit::Lowest);
                if peak < self.best.peak {
                    self.best = Incumbent {
                        offsets,
                        peak,
                        algorithm: "greedy by size, lowest fit".into(),
                    };
                }
            }
            Err(Stop::Cutoff(k)) => spent += (k as u64 + 1) * cost(Fit::Lowest),
            Err(Stop::Deadline) => {
                self.baseline = Baseline::Cut;
                return spent;
            }
        }
        match self
            .squeezer
            .place(&order, Fit::Best, u64::MAX, Some(deadline))
        {
            Ok((offsets, peak)) => {
                spent += n * cost(Fit::Best);
                self.baseline = Baseline::Finished(peak);
                if peak < self.best.peak {
                    self.best = Incumbent {
                        offsets,
                        peak,
                        algorithm: "greedy by size".into(),
                    };
                }
                self.build_descent();
            }
            Err(_) => self.baseline = Baseline::Cut,
        }
        spent
    }

    /// One perturb-and-squeeze round; returns the cost units spent.
    fn local_search_round(&mut self, deadline: Instant) -> u64 {
        let n = self.buffers.len();
        if self.order.is_none() {
            let size = self.order(Key::Size);
            self.order = Some((size, Fit::Best));
        }
        let Some((order, fit)) = &mut self.order else {
            return n as u64;
        };
        self.rounds += 1;
        if !self.pending {
            self.candidate.clone_from(order);
            let swaps = 1 + self.rng.below(3) as usize;
            for _ in 0..swaps {
                let a = self.rng.below(n as u64) as usize;
                let reach = (n as u64 / 8).max(2);
                let b = (a as u64 + 1 + self.rng.below(reach)).min(n as u64 - 1) as usize;
                self.candidate.swap(a, b);
            }
        }
        self.pending = false;
        let unit = cost(*fit);
        let placements =
            match self
                .squeezer
                .place(&self.candidate, *fit, self.best.peak, Some(deadline))
            {
                Ok((offsets, peak)) => {
                    order.copy_from_slice(&self.candidate);
                    if peak < self.best.peak {
                        self.best = Incumbent {
                            offsets,
                            peak,
                            algorithm: format!("randomised squeeze (round {})", self.rounds),
                        };
                    }
                    n as u64
                }
                Err(Stop::Cutoff(k)) if k > 0 => {
                    // The buffer at `k` broke the cutoff: propose it earlier, evaluated next round.
                    let to = self.rng.below(k as u64) as usize;
                    let x = self.candidate.remove(k);
                    self.candidate.insert(to, x);
                    self.pending = true;
                    k as u64 + 1
                }
                Err(Stop::Cutoff(_)) => 1,
                Err(Stop::Deadline) => n as u64,
            };
        placements * unit
    }

    /// Whether the descent walk can make progress (it exists and is not stuck).
    fn descending(&self) -> bool {
        self.descent.as_ref().is_some_and(|d| !d.stuck())
    }

    /// Hands a plan found elsewhere (a lower peak) to the descent walk.
    pub fn offer(&mut self, plan: &Incumbent) {
        if let Some(descent) = &mut self.descent {
            descent.rebase(&plan.offsets, plan.peak);
        }
    }

    /// One peak-descent round from the best plan so far; returns the cost units spent (its
    /// lowest-fit placements: a round cut off early costs what it placed).
    fn descent_round(&mut self, deadline: Instant) -> u64 {
        self.rounds += 1;
        let Some(descent) = &mut self.descent else {
            return self.buffers.len() as u64;
        };
        let before = descent.placements();
        descent.rebase(&self.best.offsets, self.best.peak);
        if let Some((offsets, peak)) = descent.round(deadline) {
            self.best = Incumbent {
                offsets,
                peak,
                algorithm: format!("peak descent (round {})", self.rounds),
            };
        }
        (descent.placements() - before).max(1) * cost(Fit::Lowest)
    }

    /// The buffer order for `key`, ids as the final tie-break.
    fn order(&mut self, key: Key) -> Vec<u32> {
        let b = self.buffers;
        let n = b.len();
        let len = |i: usize| b[i].upper - b[i].lower;
        if matches!(
            key,
            Key::PressureLife | Key::PressureStart | Key::PressureSize
        ) && self.heaviest.is_none()
        {
            self.heaviest = Some(max_load_over_life(b));
        }
        let h = self.heaviest.as_deref().unwrap_or(&[]);
        match key {
            Key::PressureLife => {
                order_by(n, |i| (Reverse(h[i]), Reverse(len(i)), Reverse(b[i].size)))
            }
            Key::PressureStart => order_by(n, |i| (Reverse(h[i]), b[i].lower, Reverse(b[i].size))),
            Key::PressureSize => {
                order_by(n, |i| (Reverse(h[i]), Reverse(b[i].size), Reverse(len(i))))
            }
            Key::SizeStart => order_by(n, |i| (Reverse(b[i].size), b[i].lower)),
            Key::Size => super::greedy::size_order(b),
            Key::Lifetime => order_by(n, |i| (Reverse(len(i)), Reverse(b[i].size))),
            Key::Area => order_by(n, |i| Reverse(b[i].size as u128 * len(i) as u128)),
            Key::End => order_by(n, |i| (Reverse(b[i].upper), Reverse(b[i].size))),
            Key::Start => order_by(n, |i| (b[i].lower, Reverse(b[i].size))),
        }
    }
}
