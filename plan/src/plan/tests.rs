//! Property tests over random instances: the verifier agrees with an O(n²) oracle, and every
//! planner returns verified plans between the lower bound and the greedy baseline.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use proptest::prelude::*;

use super::fixtures::{buffer_lists, decide, gap_example};
use super::{
    Buffer, Plan, SolveOptions, greedy_by_size, lower_bound, perfect_packing, solve, verify,
};

/// The pairwise check, like MiniMalloc's `validator.cc`: valid iff aligned, within capacity, and no
/// two time-overlapping buffers share a byte.
fn oracle(buffers: &[Buffer], offsets: &[u64], capacity: Option<u64>) -> bool {
    for (i, a) in buffers.iter().enumerate() {
        let oa = offsets[i];
        if !oa.is_multiple_of(a.align) || capacity.is_some_and(|c| oa + a.size > c) {
            return false;
        }
        for (j, b) in buffers.iter().enumerate().skip(i + 1) {
            let ob = offsets[j];
            if a.conflicts(b) && oa < ob + b.size && ob < oa + a.size {
                return false;
            }
        }
    }
    true
}

fn instance(max: usize) -> impl Strategy<Value = Vec<Buffer>> {
    buffer_lists(30, 10, 50, 4, max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn verifier_agrees_with_pairwise_oracle(
        buffers in instance(25),
        raw in prop::collection::vec(0u64..120, 25),
        cap in prop::option::of(40u64..200),
    ) {
        // Round offsets to each alignment most of the time so valid plans are common.
        let offsets: Vec<u64> = buffers
            .iter()
            .zip(&raw)
            .map(|(b, &o)| if o % 7 == 0 { o } else { o / b.align * b.align })
            .collect();
        let plan = Plan::from_offsets(&buffers, offsets.clone());
        let ok = verify(&buffers, &plan, cap).is_ok();
        prop_assert_eq!(ok, oracle(&buffers, &offsets, cap));
    }

    #[test]
    fn greedy_plans_are_valid(buffers in instance(60)) {
        let plan = greedy_by_size(&buffers).unwrap();
        prop_assert!(oracle(&buffers, &plan.offsets, None));
        verify(&buffers, &plan, None).unwrap();
        prop_assert!(plan.peak >= lower_bound(&buffers));
    }

    #[test]
    fn solve_is_valid_bounded_and_never_worse_than_greedy(buffers in instance(40), seed in 0u64..1000) {
        let opts = SolveOptions { time_limit: Duration::from_millis(20), seed, ..SolveOptions::default() };
        let s = solve(&buffers, &opts).unwrap();
        let plan = s.plan.unwrap();
        prop_assert!(oracle(&buffers, &plan.offsets, None));
        prop_assert_eq!(plan.peak, s.best_peak);
        prop_assert!(plan.peak >= s.lower_bound);
        prop_assert!(plan.peak <= s.greedy_peak);
        // A loaded machine can spend the 20 ms before greedy starts; the sweep stands in then.
        if s.greedy_finished {
            prop_assert_eq!(s.greedy_peak, greedy_by_size(&buffers).unwrap().peak);
        }
        if s.proved_optimal {
            prop_assert!(plan.peak == s.lower_bound || s.algorithm.contains("exact") || s.feasible == Some(true));
        }
    }

    #[test]
    fn decision_answers_are_consistent(buffers in instance(14), slack in 0u64..30) {
        let lb = lower_bound(&buffers);
        let cap = lb + slack;
        let opts = SolveOptions { time_limit: Duration::from_millis(500), capacity: Some(cap), ..SolveOptions::default() };
        let s = solve(&buffers, &opts).unwrap();
        match s.feasible {
            Some(true) => prop_assert!(oracle(&buffers, &s.plan.unwrap().offsets, Some(cap))),
            Some(false) => {
                prop_assert!(s.plan.is_none());
                // A proof of infeasibility must agree with the minimiser: the optimum is above cap.
                let m = solve(&buffers, &SolveOptions { time_limit: Duration::from_millis(500), ..SolveOptions::default() }).unwrap();
                prop_assert!(m.best_peak > cap);
            }
            None => {}
        }
    }
}

#[test]
fn solve_reaches_the_lower_bound_on_perfect_packings() {
    for seed in 0..4 {
        let (b, _) = perfect_packing(60, 4096, 500, seed);
        let opts = SolveOptions {
            time_limit: Duration::from_secs(5),
            capacity: Some(4096),
            ..SolveOptions::default()
        };
        let s = solve(&b, &opts).unwrap();
        assert_eq!(s.feasible, Some(true), "seed {seed}: {s:?}");
        verify(&b, s.plan.as_ref().unwrap(), Some(4096)).unwrap();
        let m = solve(
            &b,
            &SolveOptions {
                time_limit: Duration::from_secs(5),
                ..SolveOptions::default()
            },
        )
        .unwrap();
        assert_eq!(m.best_peak, 4096);
        assert!(m.proved_optimal);
    }
}

#[test]
fn minimisation_proves_the_gap_example_optimal_at_five() {
    let b = gap_example();
    let s = solve(&b, &SolveOptions::default()).unwrap();
    assert_eq!((s.lower_bound, s.best_peak, s.proved_optimal), (4, 5, true));
    let d = decide(&b, 4);
    assert_eq!(d.feasible, Some(false));
    assert!(d.plan.is_none());
    // The proof names the part of the instance that has no placement: all of it here.
    let why = d.infeasible_reason.unwrap();
    assert!(
        why.contains(
            "exhausted every canonical placement of the 7 buffers live between steps 0 and 7"
        ),
        "{why}"
    );
}

/// A second infeasible family, beside the gap example: aligned slots as pigeonholes. `k + 1`
/// buffers of `unit` bytes aligned to `2 * unit`, live together around one time: below a capacity
/// of `2k·unit` only `k` aligned offsets leave room, so no plan exists although the load,
/// `(k + 1)·unit`, is far below the capacity. One more unit opens slot `k + 1`. A feasible part
/// comes first, so the proof must name the later part.
fn aligned_pigeonholes(k: u64, unit: u64) -> Vec<Buffer> {
    let mut b: Vec<Buffer> = (0..4).map(|i| Buffer::new(i, i + 3, unit)).collect();
    b.extend((0..=k).map(|i| Buffer {
        align: 2 * unit,
        ..Buffer::new(100 + i, 101 + k + i, unit)
    }));
    b
}

#[test]
fn aligned_pigeonholes_are_proved_infeasible_below_the_load_bound() {
    for k in 2..=5u64 {
        for unit in [1u64, 64] {
            let b = aligned_pigeonholes(k, unit);
            let decide = |capacity: u64| {
                solve(
                    &b,
                    &SolveOptions {
                        capacity: Some(capacity),
                        time_limit: Duration::from_secs(10),
                        threads: 1,
                        ..SolveOptions::default()
                    },
                )
                .unwrap()
            };
            let tight = decide(2 * k * unit);
            assert!(tight.lower_bound < 2 * k * unit, "k {k}: {tight:?}");
            assert_eq!(tight.feasible, Some(false), "k {k} unit {unit}: {tight:?}");
            assert!(tight.plan.is_none());
            let why = tight.infeasible_reason.unwrap();
            // The proof names the pigeonholes' part, not the feasible part before it. They are
            // all live at step 100 + k only: one step, never a range from a step to itself
            // (regression: "between times 102 and 102").
            assert_eq!(
                why,
                format!(
                    "the exact search exhausted every canonical placement of the {} buffers live \
                     at step {} without finding one",
                    k + 1,
                    100 + k
                ),
                "k {k} unit {unit}"
            );
            let roomy = decide((2 * k + 1) * unit);
            assert_eq!(roomy.feasible, Some(true), "k {k} unit {unit}: {roomy:?}");
            let plan = roomy.plan.unwrap();
            verify(&b, &plan, Some((2 * k + 1) * unit)).unwrap();
        }
    }
}

#[test]
fn capacity_below_a_live_set_is_infeasible_without_search() {
    let b = [Buffer::new(0, 2, 5), Buffer::new(1, 3, 5)];
    let s = decide(&b, 9);
    assert_eq!((s.feasible, s.best_peak), (Some(false), 10));
}

#[test]
fn empty_and_trivial_instances() {
    let s = solve(&[], &SolveOptions::default()).unwrap();
    assert_eq!((s.best_peak, s.lower_bound, s.proved_optimal), (0, 0, true));
    let b = [Buffer::new(0, 1, 7), Buffer::new(1, 2, 9)];
    let s = solve(&b, &SolveOptions::default()).unwrap();
    assert_eq!(s.plan.unwrap().offsets, vec![0, 0]);
}

#[test]
fn greedy_uses_the_gap_below_the_lowest_block() {
    // XNNPACK's pitfall: it never tries the space below the lowest conflicting block.
    let b = Buffer::list(&[(0, 4, 8), (4, 8, 6), (2, 6, 6), (5, 7, 2)]);
    let plan = greedy_by_size(&b).unwrap();
    verify(&b, &plan, None).unwrap();
    // 8 at 0; 6 [4,8) at 0; 6 [2,6) conflicts both -> 8; 2 [5,7) conflicts [4,8)@0..6 and [2,6)@8..14:
    // the gap [6, 8) below the block at 8 fits it.
    assert_eq!(plan.offsets, vec![0, 0, 8, 6]);
    assert_eq!(plan.peak, 14);
}

#[test]
fn huge_buffers_never_alive_together_plan_at_offset_zero() {
    // Regression: the padded total of all buffers (2^64) was refused although the two never
    // overlap in time and each fits in u64 on its own.
    let b = [Buffer::new(0, 1, 1 << 63), Buffer::new(1, 2, 1 << 63)];
    let s = solve(&b, &SolveOptions::default()).unwrap();
    assert_eq!(s.plan.unwrap().offsets, vec![0, 0]);
    assert_eq!((s.best_peak, s.proved_optimal), (1 << 63, true));
}

#[test]
fn conflicting_huge_buffers_are_refused_with_the_exact_total() {
    let b = [Buffer::new(0, 2, 1 << 63), Buffer::new(1, 3, 1 << 63)];
    match solve(&b, &SolveOptions::default()) {
        Err(crate::Error::PlanTooLarge {
            buffers,
            padded_total,
            limit,
        }) => {
            assert_eq!((buffers, padded_total), (2, 1u128 << 64));
            assert_eq!(limit, crate::plan::PLAN_OFFSET_LIMIT);
            let msg = solve(&b, &SolveOptions::default()).unwrap_err().to_string();
            assert!(msg.contains("18446744073709551616"), "{msg}");
        }
        other => panic!("expected PlanTooLarge, got {other:?}"),
    }
}

#[test]
fn infeasible_capacity_says_why() {
    let b = [Buffer::new(0, 2, 5), Buffer::new(1, 3, 5)];
    let s = decide(&b, 9);
    assert_eq!(s.feasible, Some(false));
    assert_eq!(
        s.infeasible_reason.as_deref(),
        Some("the 2 buffers live at step 1 need 10 bytes together")
    );
}

#[test]
fn results_do_not_depend_on_thread_timing() {
    // Lockstep epochs: the same seed and thread count give the same plan on every run.
    let desc = crate::plan::PackingDesc {
        count: 60,
        capacity: 1 << 16,
        horizon: 400,
        grid: 64,
        family: crate::plan::PackingFamily::Pinwheel,
        seed: 11,
    };
    let (b, _) = desc.generate();
    for threads in [1, 2, 3] {
        let opts = SolveOptions {
            time_limit: Duration::from_secs(30),
            threads,
            ..SolveOptions::default()
        };
        let first = solve(&b, &opts).unwrap();
        assert!(first.proved_optimal, "{first:?}");
        for _ in 0..3 {
            let again = solve(&b, &opts).unwrap();
            assert_eq!(again.plan, first.plan, "threads {threads}");
            assert_eq!(again.algorithm, first.algorithm);
        }
    }
}

fn random_instance(n: usize, seed: u64) -> Vec<Buffer> {
    crate::plan::random_lifetimes(n, seed)
}

#[test]
fn the_time_limit_holds_on_a_large_instance() {
    // Not a speed test: a generous bound that a phase ignoring the deadline (greedy on 200k
    // buffers takes tens of seconds) would break even in a debug build.
    let b = random_instance(200_000, 3);
    for limit in [0, 300] {
        let opts = SolveOptions {
            time_limit: Duration::from_millis(limit),
            ..SolveOptions::default()
        };
        let s = solve(&b, &opts).unwrap();
        assert!(
            s.elapsed <= opts.time_limit + Duration::from_secs(3),
            "limit {limit} ms took {:?}",
            s.elapsed
        );
        verify(&b, s.plan.as_ref().unwrap(), None).unwrap();
        assert!(s.best_peak >= s.lower_bound);
    }
}

#[test]
fn no_time_at_all_still_gives_a_verified_plan_far_below_stacking() {
    // A limit of 0: the first plan is cut before its first endpoint, so every buffer goes to the
    // size-class slabs; verified, and within a few times the bound (stacking them was hundreds).
    let b = random_instance(100_000, 5);
    for threads in [1, 2] {
        let opts = SolveOptions {
            time_limit: Duration::ZERO,
            threads,
            ..SolveOptions::default()
        };
        let s = solve(&b, &opts).unwrap();
        verify(&b, s.plan.as_ref().unwrap(), None).unwrap();
        assert!(
            s.best_peak < 3 * s.lower_bound,
            "threads {threads}: {} for a bound of {}, {}",
            s.best_peak,
            s.lower_bound,
            s.algorithm
        );
        assert!(s.algorithm.contains("cut at 0%"), "{}", s.algorithm);
    }
}

#[test]
fn an_unrepresentable_time_limit_means_no_limit_not_a_panic() {
    // Regression: `start + Duration::MAX` overflowed `Instant` and panicked.
    let b = [Buffer::new(0, 2, 5), Buffer::new(1, 3, 5)];
    let s = solve(
        &b,
        &SolveOptions {
            time_limit: Duration::MAX,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    assert_eq!((s.best_peak, s.proved_optimal), (10, true));
}

/// Without the baseline, a first plan at the lower bound is the answer and greedy by size does
/// not run (its peak is the first plan's); one above the bound still runs it.
#[test]
fn the_baseline_runs_only_when_asked_or_needed() {
    // A stack of four buffers live together: the first plan meets the bound.
    let stack: Vec<Buffer> = (0..4).map(|i| Buffer::new(i, 8, 16 << i)).collect();
    let opts = |baseline| SolveOptions {
        baseline,
        ..SolveOptions::default()
    };
    let with = solve(&stack, &opts(true)).unwrap();
    let without = solve(&stack, &opts(false)).unwrap();
    assert_eq!(with.best_peak, with.lower_bound);
    assert!(with.greedy_finished);
    let plan = without.plan.unwrap();
    assert_eq!(plan.peak, with.best_peak);
    verify(&stack, &plan, None).unwrap();
    assert!(!without.greedy_finished);
    assert_eq!(without.greedy_peak, without.best_peak);
    // The gap example's first plan is above the bound: the search, baseline included, runs.
    let s = solve(&gap_example(), &opts(false)).unwrap();
    assert!(s.greedy_finished && s.proved_optimal, "{s:?}");
}

#[test]
fn too_many_threads_are_refused_before_any_work() {
    let b = [Buffer::new(0, 2, 5)];
    let opts = |threads| SolveOptions {
        threads,
        ..SolveOptions::default()
    };
    match solve(&b, &opts(crate::plan::MAX_THREADS + 1)) {
        Err(crate::Error::Argument(crate::ArgumentError::TooMany { count, limit, .. })) => {
            assert_eq!((count, limit), (1025, 1024));
        }
        other => panic!("expected TooMany, got {other:?}"),
    }
    assert!(solve(&b, &opts(crate::plan::MAX_THREADS)).is_ok());
}

#[test]
fn the_baseline_worker_keeps_its_lowest_fit_twin_when_lower() {
    // The baseline worker runs greedy by size at the lowest fit before the best fit: its plan is
    // the answer when lower (here, as on most random instances) and stands when the deadline cuts
    // the best fit. Budget 0: the step runs the baseline and nothing else.
    use super::events::Events;
    use super::greedy::{Fit, greedy_by_size_with};
    use super::heuristics::{Heuristics, Incumbent};
    use super::sweep::tests::sweep_all;
    let b = random_instance(3000, 1);
    let best = greedy_by_size(&b).unwrap().peak;
    let lowest = greedy_by_size_with(&b, Fit::Lowest).unwrap().peak;
    let events = Events::new(&b);
    let sweep = sweep_all(&b, &events);
    assert!(
        lowest < best && lowest < sweep.peak,
        "{lowest} {best} {}",
        sweep.peak
    );
    let start = Incumbent {
        offsets: sweep.offsets,
        peak: sweep.peak,
        algorithm: "sweep".into(),
    };
    let mut worker = Heuristics::new(&b, &events, start, (0, 0), true);
    let far = crate::time::Instant::now() + Duration::from_secs(3600);
    worker.step(0, 0, far, &|| false);
    assert_eq!(worker.greedy_peak(), Some(best));
    assert_eq!(worker.best().peak, lowest);
    assert_eq!(worker.best().algorithm, "greedy by size, lowest fit");
    let plan = Plan::from_offsets(&b, worker.best().offsets.clone());
    verify(&b, &plan, None).unwrap();
}

/// Regression for issue 46 (finding 4): `tensormem-plan --threads 1024` ran 1024 portfolio
/// threads whatever the machine (about 29 MB each on 200k buffers, 24 GB in all) and overran its
/// time limit more the more threads it had. Counts above the cores now run on the cores.
#[test]
fn thread_counts_above_the_cores_run_on_the_cores_within_the_limit() {
    let cores =
        std::thread::available_parallelism().map_or(1, |n| n.get().min(crate::plan::MAX_THREADS));
    assert_eq!(crate::plan::portfolio_threads(0), cores);
    assert_eq!(crate::plan::portfolio_threads(1), 1);
    assert_eq!(
        crate::plan::portfolio_threads(crate::plan::MAX_THREADS),
        cores
    );
    assert_eq!(crate::plan::portfolio_threads(cores + 1), cores);
    // Not a speed test: a generous bound the limit holds by on any machine.
    let b = random_instance(20_000, 9);
    let opts = SolveOptions {
        threads: crate::plan::MAX_THREADS,
        time_limit: Duration::from_millis(300),
        ..SolveOptions::default()
    };
    let s = solve(&b, &opts).unwrap();
    assert_eq!(s.threads, cores);
    assert!(
        s.elapsed <= opts.time_limit + Duration::from_secs(3),
        "took {:?}",
        s.elapsed
    );
    verify(&b, s.plan.as_ref().unwrap(), None).unwrap();
}
