//! Record and replay: exact repeats get planned, non-overlapping offsets; divergence is detected.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use proptest::prelude::*;

use super::super::{Plan, lower_bound, verify};
use super::{Event, Recorder, Recording, RepeatDetector, ReplayPlan, Step};
use crate::Error;

/// A transformer-layer-like step: per layer, allocate q/k/v/attn/out and an MLP hidden, free in a
/// nested order; `seq` scales the sizes (a different sequence length = a dynamic shape).
fn transformer_step(layers: usize, seq: u64) -> Recording {
    let mut r = Recorder::new();
    let d = 64 * seq;
    let mut x = r.allocate(d, 256).unwrap();
    for _ in 0..layers {
        let q = r.allocate(d, 256).unwrap();
        let k = r.allocate(d, 256).unwrap();
        let v = r.allocate(d, 256).unwrap();
        let s = r.allocate(seq * seq * 4, 256).unwrap();
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
    assert!(matches!(r.free(9), Err(Error::InvalidArgument(_))));
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Model check: replaying a random sequence exactly hands out offsets such that allocations
    /// live at the same time never overlap and all fit in the arena.
    #[test]
    fn replayed_offsets_never_overlap_live_allocations(ops in prop::collection::vec((any::<bool>(), 1u64..512, 0u32..4, any::<u16>()), 1..80)) {
        let mut r = Recorder::new();
        let mut live: Vec<u32> = Vec::new();
        for &(alloc, size, a, pick) in &ops {
            if alloc || live.is_empty() {
                live.push(r.allocate(size, 1 << a).unwrap());
            } else {
                let k = pick as usize % live.len();
                r.free(live.swap_remove(k)).unwrap();
            }
        }
        let rec = r.finish();
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
}
