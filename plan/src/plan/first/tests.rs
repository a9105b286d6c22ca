use super::*;
use crate::plan::sweep::tests::CutAfter;
use crate::plan::{random_lifetimes, validate, verify};

#[test]
fn an_early_cut_answers_no_worse_than_slabs_alone() {
    let b = random_lifetimes(50_000, 7);
    let (events, padded) = validate(&b, 1).unwrap();
    let alone = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(0)).unwrap();
    let stacked = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(2)).unwrap();
    // The rest above the arena's top at an early cut peaks above slabs from the start.
    assert!(
        stacked.plan.peak > alone.plan.peak,
        "stacked {} against slabs alone {}",
        stacked.plan.peak,
        alone.plan.peak
    );
    let kept = or_slabs_alone(&b, &events, padded, stacked).unwrap();
    assert_eq!(kept.plan.peak, alone.plan.peak);
    assert_eq!(kept.swept, 0);
    verify(&b, &kept.plan, None).unwrap();
}

#[test]
fn a_late_cut_and_a_whole_sweep_are_kept() {
    let b = random_lifetimes(50_000, 7);
    let (events, padded) = validate(&b, 1).unwrap();
    let alone = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(0)).unwrap();
    let chunks = events.len() / GATHER - 1;
    let late = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(chunks)).unwrap();
    assert!(late.plan.peak < alone.plan.peak);
    let (peak, swept) = (late.plan.peak, late.swept);
    let kept = or_slabs_alone(&b, &events, padded, late).unwrap();
    assert_eq!((kept.plan.peak, kept.swept), (peak, swept));
    let whole = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(usize::MAX)).unwrap();
    let peak = whole.plan.peak;
    let kept = or_slabs_alone(&b, &events, padded, whole).unwrap();
    assert!(kept.finished());
    assert_eq!(kept.plan.peak, peak);
}
