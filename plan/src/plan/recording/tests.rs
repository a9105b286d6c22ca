//! Record and replay: exact repeats get planned, non-overlapping offsets; divergence is detected.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use proptest::prelude::*;

use super::super::{Plan, lower_bound, verify};
use super::stretch::predicted;
use super::{Event, Growth, Recorder, Recording, RepeatDetector, ReplayPlan, Step};
use crate::Error;

/// A transformer-layer-like step: per layer, allocate q/k/v/attn/out and an MLP hidden, free in a
/// nested order; `seq` scales the sizes (a different sequence length = a dynamic shape), the
/// attention scores with its square.
fn transformer_step(layers: usize, seq: u64) -> Recording {
    layer_step(layers, seq, seq * seq * 4)
}

/// [`transformer_step`] with flash attention: every tensor grows linearly with `seq`.
fn flash_step(layers: usize, seq: u64) -> Recording {
    layer_step(layers, seq, seq * 32)
}

/// The layers of [`transformer_step`], with attention scores of `scores` bytes.
fn layer_step(layers: usize, seq: u64, scores: u64) -> Recording {
    let mut r = Recorder::new();
    let d = 64 * seq;
    let mut x = r.allocate(d, 256).unwrap();
    for _ in 0..layers {
        let q = r.allocate(d, 256).unwrap();
        let k = r.allocate(d, 256).unwrap();
        let v = r.allocate(d, 256).unwrap();
        let s = r.allocate(scores, 256).unwrap();
        r.free(q).unwrap();
        r.free(k).unwrap();
        let a = r.allocate(d, 256).unwrap();
        r.free(s).unwrap();
        r.free(v).unwrap();
        let h = r.allocate(4 * d, 256).unwrap();
        r.free(a).unwrap();
        let y = r.allocate(d, 256).unwrap();
        r.free(h).unwrap();
        r.free(x).unwrap();
        x = y;
    }
    r.free(x).unwrap();
    r.finish()
}

#[test]
fn an_exact_repeat_is_served_from_the_plan() {
    let rec = transformer_step(4, 128);
    let plan = std::sync::Arc::new(ReplayPlan::compile(&rec, Duration::from_millis(200)).unwrap());
    let buffers = rec.buffers();
    verify(
        &buffers,
        &Plan::from_offsets(&buffers, plan.offsets().to_vec()),
        Some(plan.arena_size()),
    )
    .unwrap();
    assert!(plan.arena_size() >= lower_bound(&buffers));
    assert_eq!(plan.lower_bound(), lower_bound(&buffers));
    let mut rep = plan.replayer();
    for e in rec.events() {
        let step = match *e {
            Event::Allocate { size, align } => rep.allocate(size, align),
            Event::Free { ordinal } => rep.free(ordinal),
        };
        assert!(matches!(step, Step::Planned { .. }));
    }
    assert!(rep.complete());
}

#[test]
fn a_different_size_diverges_and_stays_diverged() {
    let rec = transformer_step(2, 128);
    let plan = std::sync::Arc::new(ReplayPlan::compile(&rec, Duration::from_millis(100)).unwrap());
    let mut rep = plan.replayer();
    let Event::Allocate { size, align } = rec.events()[0] else {
        panic!("starts with an allocation")
    };
    assert_eq!(
        rep.allocate(size, align),
        Step::Planned {
            ordinal: 0,
            offset: plan.offsets()[0]
        }
    );
    assert_eq!(rep.allocate(size + 1, align), Step::Diverged);
    assert!(rep.diverged());
    let Event::Allocate { size, align } = rec.events()[1] else {
        panic!("second event allocates")
    };
    assert_eq!(
        rep.allocate(size, align),
        Step::Diverged,
        "no planned offsets after divergence"
    );
    assert!(!rep.complete());
}

#[test]
fn a_free_out_of_order_diverges() {
    let rec = transformer_step(1, 16);
    let plan = std::sync::Arc::new(ReplayPlan::compile(&rec, Duration::from_millis(100)).unwrap());
    let mut rep = plan.replayer();
    for _ in 0..5 {
        assert!(matches!(rep.allocate(64 * 16, 256), Step::Planned { .. }) || rep.diverged());
    }
    // The recording frees q (ordinal 1) next; freeing x (ordinal 0) first is a divergence.
    assert_eq!(rep.free(0), Step::Diverged);
}

/// Walks `run` against `plan` and returns the planned offset of each allocation, or `None` at the
/// first event the plan does not serve.
fn follow(plan: &std::sync::Arc<ReplayPlan>, run: &Recording) -> Option<Vec<u64>> {
    let mut rep = plan.replayer();
    let mut offsets = Vec::new();
    for e in run.events() {
        match *e {
            Event::Allocate { size, align } => match rep.allocate(size, align) {
                Step::Planned { offset, .. } => offsets.push(offset),
                Step::Diverged => return None,
            },
            Event::Free { ordinal } => {
                if rep.free(ordinal) == Step::Diverged {
                    return None;
                }
            }
        }
    }
    rep.complete().then_some(offsets)
}

/// The first allocation's size of a recording.
fn first_size(run: &Recording) -> u64 {
    match run.events()[0] {
        Event::Allocate { size, .. } => size,
        Event::Free { .. } => panic!("a recording starts with an allocation"),
    }
}

/// `plan` stretched to `run`'s first allocation by `growth`, checked to serve `run` from start
/// to end with a valid packing inside the stretched arena.
fn stretch_and_follow(
    plan: &ReplayPlan,
    run: &Recording,
    growth: Option<&Growth>,
) -> std::sync::Arc<ReplayPlan> {
    let stretched = std::sync::Arc::new(plan.stretched(first_size(run), growth).unwrap());
    let offsets = follow(&stretched, run).expect("the longer run follows the stretched plan");
    let buffers = run.buffers();
    verify(
        &buffers,
        &Plan::from_offsets(&buffers, offsets),
        Some(stretched.arena_size()),
    )
    .unwrap();
    stretched
}

/// A longer sequence than the plan's follows the plan stretched to its first allocation from
/// start to end: its offsets are a valid packing in the stretched arena, which is the plan's arena
/// in proportion; the stretched plan still serves the plan's own run.
#[test]
fn a_stretched_plan_serves_a_longer_sequence_from_its_start() {
    let rec = flash_step(4, 128);
    let plan = ReplayPlan::compile(&rec, Duration::from_millis(200)).unwrap();
    let run = flash_step(4, 200);
    let stretched = stretch_and_follow(&plan, &run, None);
    let buffers = run.buffers();
    let proportional = (plan.arena_size() * 200)
        .div_ceil(128)
        .next_multiple_of(256);
    assert_eq!(stretched.arena_size(), proportional);
    assert!(stretched.arena_size() >= lower_bound(&buffers));
    assert!(
        follow(&stretched, &rec).is_some(),
        "a shorter run still fits"
    );
}

/// Attention scores grow with the square of the sequence, faster than the first allocation: the
/// stretched plan serves the run up to them, and the run diverges there.
#[test]
fn a_tensor_that_grew_faster_than_the_first_diverges_at_its_slot() {
    let plan = ReplayPlan::compile(&transformer_step(2, 64), Duration::from_millis(100)).unwrap();
    let run = transformer_step(2, 128);
    let stretched = std::sync::Arc::new(plan.stretched(first_size(&run), None).unwrap());
    let mut rep = stretched.replayer();
    let allocations: Vec<(u64, u64)> = run
        .events()
        .iter()
        .filter_map(|e| match *e {
            Event::Allocate { size, align } => Some((size, align)),
            Event::Free { .. } => None,
        })
        .take(5)
        .collect();
    // x, q, k and v grew as x did; the scores (the fifth) grew 4 times as much.
    for &(size, align) in &allocations[..4] {
        assert!(matches!(rep.allocate(size, align), Step::Planned { .. }));
    }
    let (size, align) = allocations[4];
    assert_eq!(rep.allocate(size, align), Step::Diverged);
}

/// Exponents fitted to two runs: the first allocation and every activation 1, the attention
/// scores 2, in either order; runs of one length or of another shape fit nothing.
#[test]
fn growth_fits_each_allocation_its_exponent() {
    let (short, long) = (transformer_step(2, 64), transformer_step(2, 96));
    let growth = Growth::between(&short, &long).unwrap();
    assert_eq!(Growth::between(&long, &short).as_ref(), Some(&growth));
    // Per layer: q, k, v, scores, attention output, MLP hidden, layer output.
    let layer = [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0];
    let expected: Vec<f64> = std::iter::once(1.0)
        .chain(layer.iter().chain(&layer).copied())
        .collect();
    assert_eq!(growth.exponents, expected);
    assert_eq!(
        growth.exponent(1000),
        1.0,
        "beyond the fitted runs: in proportion"
    );
    assert!(Growth::between(&short, &transformer_step(2, 64)).is_none());
    assert!(Growth::between(&short, &transformer_step(3, 96)).is_none());
    // A tensor that did not grow keeps its size; one that grew past cubic is held to cubic.
    let fixed = |seq: u64, other: u64| {
        let mut r = Recorder::new();
        let a = r.allocate(64 * seq, 256).unwrap();
        let b = r.allocate(other, 256).unwrap();
        r.free(b).unwrap();
        r.free(a).unwrap();
        r.finish()
    };
    let growth = Growth::between(&fixed(4, 512), &fixed(8, 512)).unwrap();
    assert_eq!(growth.exponents, [1.0, 0.0]);
    let growth = Growth::between(&fixed(4, 256), &fixed(8, 1 << 20)).unwrap();
    assert_eq!(growth.exponents, [1.0, 3.0]);
    // A square rounded up to 256 bytes in the shorter run (10 000 bytes to 10 240) fits 1.97:
    // the square. An exponent well between two whole ones stays as fitted.
    let growth = Growth::between(&fixed(100, 10_240), &fixed(200, 40_192)).unwrap();
    assert_eq!(growth.exponents, [1.0, 2.0]);
    let growth = Growth::between(&fixed(100, 10_240), &fixed(200, 30_000)).unwrap();
    assert!((1.5..1.6).contains(&growth.exponents[1]), "{growth:?}");
}

/// With the growth fitted to two shorter runs, a longer run whose scores grew with the square
/// follows the stretched plan from start to end, in an arena within an eighth of its own plan's;
/// the stretch still serves the plan's run. Growth in proportion stretches as no growth does.
#[test]
fn a_stretch_by_fitted_growth_serves_scores_that_grew_with_the_square() {
    let rec = transformer_step(2, 64);
    let plan = ReplayPlan::compile(&rec, Duration::from_millis(100)).unwrap();
    let growth = Growth::between(&rec, &transformer_step(2, 96)).unwrap();
    let run = transformer_step(2, 160);
    let stretched = stretch_and_follow(&plan, &run, Some(&growth));
    let buffers = run.buffers();
    let own = ReplayPlan::compile(&run, Duration::from_millis(100)).unwrap();
    assert!(
        8 * stretched.arena_size() <= 9 * own.arena_size(),
        "{} against {}",
        stretched.arena_size(),
        own.arena_size()
    );
    assert_eq!(stretched.lower_bound(), lower_bound(&buffers));
    assert!(
        follow(&stretched, &rec).is_some(),
        "a shorter run still fits"
    );
    let proportional = Growth {
        exponents: vec![1.0; 15],
    };
    let (a, b) = (
        plan.stretched(first_size(&run), Some(&proportional))
            .unwrap(),
        plan.stretched(first_size(&run), None).unwrap(),
    );
    assert_eq!((a.offsets(), a.arena_size()), (b.offsets(), b.arena_size()));
}

#[test]
fn stretching_refuses_a_first_allocation_it_cannot_serve() {
    let plan = ReplayPlan::compile(&flash_step(2, 64), Duration::from_millis(100)).unwrap();
    let (first, _) = plan.first_allocation().unwrap();
    assert!(plan.stretched(first, None).is_none(), "not larger");
    assert!(plan.stretched(first - 1, None).is_none(), "smaller");
    assert!(plan.stretched(u64::MAX, None).is_none(), "offsets past u64");
}

#[test]
fn recorder_rejects_bad_calls() {
    let mut r = Recorder::new();
    assert!(matches!(r.allocate(0, 1), Err(Error::ZeroSize { .. })));
    assert!(matches!(
        r.allocate(8, 3),
        Err(Error::InvalidAlignment { align: 3, .. })
    ));
    let a = r.allocate(8, 8).unwrap();
    r.free(a).unwrap();
    assert!(matches!(r.free(a), Err(Error::DoubleFree { slot: 0, .. })));
    assert!(matches!(
        r.free(9),
        Err(Error::Argument(crate::ArgumentError::OutOfRange {
            index: 9,
            ..
        }))
    ));
    // Never-freed allocations live to the end.
    let b = r.allocate(4, 1).unwrap();
    let rec = r.finish();
    assert_eq!(rec.buffers()[b as usize].upper, rec.events().len() as u64);
    assert_eq!(rec.allocations(), 2);
}

#[test]
fn repeat_detector_counts_consecutive_identical_runs() {
    let mut d = RepeatDetector::new();
    let a = transformer_step(2, 64);
    let b = transformer_step(2, 96);
    assert_eq!(d.observe(&a), 1);
    assert_eq!(d.observe(&a), 2);
    assert_eq!(d.observe(&b), 1);
    assert_eq!(d.observe(&b), 2);
    assert_eq!(d.observe(&a), 1);
    assert_eq!(d.times_seen(&a), 3);
}

/// A recording of random operations: (allocate or free, size, log2 of the alignment, which live
/// allocation to free).
fn random_recording(ops: &[(bool, u64, u32, u16)]) -> Recording {
    let mut r = Recorder::new();
    let mut live: Vec<u32> = Vec::new();
    for &(alloc, size, a, pick) in ops {
        if alloc || live.is_empty() {
            live.push(r.allocate(size, 1 << a).unwrap());
        } else {
            let k = pick as usize % live.len();
            r.free(live.swap_remove(k)).unwrap();
        }
    }
    r.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Model check: replaying a random sequence exactly hands out offsets such that allocations
    /// live at the same time never overlap and all fit in the arena.
    #[test]
    fn replayed_offsets_never_overlap_live_allocations(ops in prop::collection::vec((any::<bool>(), 1u64..512, 0u32..4, any::<u16>()), 1..80)) {
        let rec = random_recording(&ops);
        let plan = std::sync::Arc::new(ReplayPlan::compile(&rec, Duration::from_millis(10)).unwrap());
        let mut rep = plan.replayer();
        let mut held: Vec<(u64, u64, u32)> = Vec::new();
        for e in rec.events() {
            match *e {
                Event::Allocate { size, align } => {
                    let Step::Planned { ordinal, offset } = rep.allocate(size, align) else { panic!("diverged on an exact repeat") };
                    prop_assert_eq!(offset % align, 0);
                    prop_assert!(offset + size <= plan.arena_size());
                    for &(o, s, _) in &held {
                        prop_assert!(offset + size <= o || o + s <= offset, "overlap with a live allocation");
                    }
                    held.push((offset, size, ordinal));
                }
                Event::Free { ordinal } => {
                    let freed = matches!(rep.free(ordinal), Step::Planned { .. });
                    prop_assert!(freed);
                    held.retain(|h| h.2 != ordinal);
                }
            }
        }
        prop_assert!(rep.complete());
    }

    /// Model check: a plan stretched by any factor, with any growth, keeps every two buffers
    /// live together in disjoint slots inside its arena, aligned, none smaller than the plan's
    /// or than its predicted size.
    #[test]
    fn stretched_slots_stay_apart(ops in prop::collection::vec((any::<bool>(), 1u64..512, 0u32..4, any::<u16>()), 1..80), grow in 1u64..5000, exponents in prop::option::of(prop::collection::vec(0.0f64..3.0, 80))) {
        let rec = random_recording(&ops);
        let plan = ReplayPlan::compile(&rec, Duration::from_millis(10)).unwrap();
        let (first, _) = plan.first_allocation().unwrap();
        let growth = exponents.map(|exponents| Growth { exponents });
        let stretched = plan.stretched(first + grow, growth.as_ref()).unwrap();
        let slots = Recording { events: stretched.events.clone(), shape: 0, sizes: 0 };
        let buffers = slots.buffers();
        verify(&buffers, &Plan::from_offsets(&buffers, stretched.offsets().to_vec()), Some(stretched.arena_size())).unwrap();
        for (k, (slot, buffer)) in buffers.iter().zip(rec.buffers()).enumerate() {
            let exponent = growth.as_ref().map_or(1.0, |g| g.exponent(k));
            prop_assert!(slot.size >= predicted(buffer.size, first, first + grow, exponent).unwrap());
            prop_assert!(slot.size >= buffer.size);
        }
    }
}
