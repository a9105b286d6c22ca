use super::*;
use crate::plan::generate::perfect_packing;
use crate::plan::portfolio::peak_of;
use crate::plan::{Plan, verify};

fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(3600)
}

/// Every buffer on its own floor, in id order: valid for any instance, far above the bound.
fn stacked(buffers: &[Buffer]) -> Vec<u64> {
    let mut top = 0;
    buffers
        .iter()
        .map(|b| {
            let o = top;
            top += b.size;
            o
        })
        .collect()
}

/// Runs up to `rounds` rounds; checks every plan it reports and returns the last one.
fn walk(buffers: &[Buffer], offsets: Vec<u64>, seed: u64, rounds: usize) -> (Vec<u64>, u64) {
    let events = Events::new(buffers);
    let (lb, fullest) = events.peak_load();
    let mut peak = peak_of(buffers, &offsets);
    let mut best = offsets;
    let mut walk = Descent::new(buffers, &events, fullest, &best, peak, seed);
    for _ in 0..rounds {
        if walk.stuck() {
            break;
        }
        if let Some((offsets, p)) = walk.round(far_future()) {
            assert!(p < peak, "a reported plan is lower than the one before it");
            assert!(p >= lb);
            assert_eq!(p, peak_of(buffers, &offsets));
            let plan = Plan {
                offsets: offsets.clone(),
                peak: p,
            };
            verify(buffers, &plan, None).expect("every reported plan is valid");
            (best, peak) = (offsets, p);
        }
    }
    (best, peak)
}

#[test]
fn closes_the_hole_at_the_fullest_step() {
    // B and C overlap only at time 4, where the load (8) peaks. The plan leaves a hole of 1 under
    // B there; stacking the buffers live at 4 without a hole reaches the bound in one round.
    let b = Buffer::list(&[(0, 10, 4), (0, 5, 2), (4, 10, 2)]);
    let with_hole = vec![2, 7, 0];
    verify(
        &b,
        &Plan {
            offsets: with_hole.clone(),
            peak: 9,
        },
        None,
    )
    .unwrap();
    let (offsets, peak) = walk(&b, with_hole, 0, 1);
    assert_eq!(peak, 8);
    assert_eq!(offsets, vec![2, 6, 0]);
}

#[test]
fn lowers_a_stacked_plan_and_every_step_is_valid() {
    for seed in 0..6 {
        let (b, _) = perfect_packing(60, 1 << 20, 1000, seed);
        let start = stacked(&b);
        let start_peak = peak_of(&b, &start);
        let (_, peak) = walk(&b, start, seed, 300);
        assert!(
            peak < start_peak,
            "seed {seed}: no progress from {start_peak}"
        );
    }
}

#[test]
fn equal_seeds_walk_equally() {
    let (b, _) = perfect_packing(80, 1 << 20, 1000, 3);
    let one = walk(&b, stacked(&b), 7, 200);
    let two = walk(&b, stacked(&b), 7, 200);
    assert_eq!(one, two);
}

#[test]
fn a_plan_at_the_bound_is_never_replaced() {
    let (b, witness) = perfect_packing(40, 1 << 16, 200, 1);
    let events = Events::new(&b);
    let (lb, fullest) = events.peak_load();
    assert_eq!(peak_of(&b, &witness), lb);
    let mut walk = Descent::new(&b, &events, fullest, &witness, lb, 0);
    for _ in 0..50 {
        if walk.stuck() {
            break;
        }
        assert!(walk.round(far_future()).is_none());
    }
}

#[test]
fn a_passed_deadline_stops_the_round() {
    let (b, _) = perfect_packing(600, 1 << 20, 1000, 2);
    let events = Events::new(&b);
    let (_, fullest) = events.peak_load();
    let start = stacked(&b);
    let peak = peak_of(&b, &start);
    let mut walk = Descent::new(&b, &events, fullest, &start, peak, 0);
    assert!(walk.round(Instant::now()).is_none());
}
