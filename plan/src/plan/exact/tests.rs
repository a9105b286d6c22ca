//! Exact search: perfect packings are found at capacity = lower bound, infeasibility is proved.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::{Duration, Instant};

use super::super::fixtures::{buffer_lists, gap_example};
use super::super::{Buffer, Plan, lower_bound, parse_csv, perfect_packing, verify};
use super::{Event, Outcome, Prover};

/// Decides whether `buffers` (valid, see [`super::validate`]) fit within `capacity`: restarts
/// round-robin over the preorders with a node limit that doubles each round (a [`Prover`] on
/// its own), until a run completes or `deadline` passes.
fn decide(buffers: &[Buffer], capacity: u64, deadline: Instant) -> Outcome {
    let mut prover = Prover::new(buffers, 0, 1);
    loop {
        match prover.step(Some(capacity), 0, 0, deadline, &|| false) {
            Event::Found { offsets, .. } => return Outcome::Found(offsets),
            Event::Proved { reason, .. } => return Outcome::Infeasible(reason),
            Event::GaveUp { .. } | Event::Working if Instant::now() >= deadline => {
                return Outcome::Timeout;
            }
            Event::GaveUp { .. } | Event::Working => {}
        }
    }
}

fn deadline(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

fn proved(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Infeasible(_))
}

fn check_found(buffers: &[Buffer], capacity: u64, outcome: Outcome) {
    let Outcome::Found(offsets) = outcome else {
        panic!("expected a plan within {capacity}, got {outcome:?}")
    };
    let plan = Plan::from_offsets(buffers, offsets);
    verify(buffers, &plan, Some(capacity)).unwrap();
}

#[test]
fn proves_the_load_gap_example_infeasible_at_its_lower_bound() {
    let b = gap_example();
    assert_eq!(lower_bound(&b), 4);
    assert!(proved(&decide(&b, 4, deadline(5))));
    check_found(&b, 5, decide(&b, 5, deadline(5)));
}

#[test]
fn solves_every_omnimalloc_fixture_at_its_capacity() {
    let files: [(&str, &str, u64); 7] = [
        (
            "a.6",
            include_str!("../../../tests/data/omnimalloc-small/a.6.csv"),
            6,
        ),
        (
            "b.6",
            include_str!("../../../tests/data/omnimalloc-small/b.6.csv"),
            6,
        ),
        (
            "c.8",
            include_str!("../../../tests/data/omnimalloc-small/c.8.csv"),
            8,
        ),
        (
            "d.9",
            include_str!("../../../tests/data/omnimalloc-small/d.9.csv"),
            9,
        ),
        (
            "e.12",
            include_str!("../../../tests/data/omnimalloc-small/e.12.csv"),
            12,
        ),
        (
            "f.14",
            include_str!("../../../tests/data/omnimalloc-small/f.14.csv"),
            14,
        ),
        (
            "g.7",
            include_str!("../../../tests/data/omnimalloc-small/g.7.csv"),
            7,
        ),
    ];
    for (name, text, capacity) in files {
        let inst = parse_csv(text, name).unwrap();
        assert_eq!(lower_bound(&inst.buffers), capacity, "{name}");
        check_found(
            &inst.buffers,
            capacity,
            decide(&inst.buffers, capacity, deadline(5)),
        );
        assert!(
            proved(&decide(&inst.buffers, capacity - 1, deadline(5))),
            "{name}"
        );
    }
}

#[test]
fn finds_generated_perfect_packings() {
    for seed in 0..12 {
        let (b, witness) = perfect_packing(40, 1000, 200, seed);
        let cap = lower_bound(&b);
        assert_eq!(cap, 1000);
        verify(&b, &Plan::from_offsets(&b, witness), Some(cap)).unwrap();
        check_found(&b, cap, decide(&b, cap, deadline(10)));
        assert!(proved(&decide(&b, cap - 1, deadline(5))), "seed {seed}");
    }
}

#[test]
fn respects_alignment() {
    // Two aligned buffers overlapping a small one: offsets must be multiples of 8.
    let b = vec![
        Buffer {
            lower: 0,
            upper: 4,
            size: 3,
            align: 1,
        },
        Buffer {
            lower: 1,
            upper: 3,
            size: 8,
            align: 8,
        },
        Buffer {
            lower: 2,
            upper: 5,
            size: 8,
            align: 8,
        },
    ];
    assert!(proved(&decide(&b, 18, deadline(5))));
    check_found(&b, 19, decide(&b, 19, deadline(5)));
}

#[test]
fn timeout_is_not_a_proof() {
    let (b, _) = perfect_packing(300, 1 << 20, 1 << 20, 99);
    let cap = lower_bound(&b);
    // An already-passed deadline must report a timeout (or a plan found before the first check),
    // never infeasibility.
    let out = decide(&b, cap, Instant::now());
    assert!(!proved(&out));
}

mod properties {
    use proptest::prelude::*;

    use super::super::super::{PackingDesc, PackingFamily, greedy_by_size};
    use super::*;

    fn instance() -> impl Strategy<Value = Vec<Buffer>> {
        buffer_lists(20, 8, 20, 3, 14)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// A wrong prune shows up as a false proof: every generated perfect packing (all three
        /// families, pieces solved independently after decomposition) must be found at capacity.
        #[test]
        fn never_claims_a_perfect_packing_infeasible(
            seed in 0u64..10_000,
            count in 2usize..40,
            family in 0usize..3,
        ) {
            let family = [PackingFamily::Guillotine, PackingFamily::LongAndShort, PackingFamily::Pinwheel][family];
            let desc = PackingDesc { count, capacity: 64, horizon: 60, grid: 1, family, seed };
            let (b, _) = desc.generate();
            check_found(&b, 64, decide(&b, 64, deadline(20)));
        }

        /// Decisions are monotone in the capacity and agree with greedy's witness; every plan found
        /// verifies within its capacity (alignment included).
        #[test]
        fn decisions_are_monotone_and_verified(b in instance()) {
            let lb = lower_bound(&b);
            let greedy = greedy_by_size(&b).unwrap().peak;
            let mut proved_below = true;
            for cap in (lb.saturating_sub(1)..=greedy).rev() {
                match decide(&b, cap, deadline(20)) {
                    Outcome::Found(offsets) => {
                        prop_assert!(proved_below, "found at {} after a proof above it", cap);
                        let plan = Plan::from_offsets(&b, offsets);
                        verify(&b, &plan, Some(cap)).unwrap();
                    }
                    Outcome::Infeasible(_) => {
                        prop_assert!(cap < greedy, "greedy fits {}", greedy);
                        proved_below = false;
                    }
                    Outcome::Timeout => prop_assert!(false, "tiny instance timed out"),
                }
            }
            prop_assert!(!proved_below || lb == 0, "capacity lb - 1 must be infeasible");
        }
    }
}

/// Whether `b` fits within `capacity`, by trying every offset of every buffer (tiny instances).
fn fits_by_enumeration(b: &[Buffer], capacity: u64) -> bool {
    fn place(b: &[Buffer], capacity: u64, offsets: &mut Vec<u64>) -> bool {
        let i = offsets.len();
        if i == b.len() {
            return true;
        }
        let Some(room) = capacity.checked_sub(b[i].size) else {
            return false;
        };
        for o in (0..=room).filter(|o| o % b[i].align == 0) {
            let clear = (0..i).all(|j| {
                let (x, y) = (&b[i], &b[j]);
                let live_together = x.lower < y.upper && y.lower < x.upper;
                !live_together || o + x.size <= offsets[j] || offsets[j] + y.size <= o
            });
            if clear {
                offsets.push(o);
                if place(b, capacity, offsets) {
                    return true;
                }
                offsets.pop();
            }
        }
        false
    }
    place(b, capacity, &mut Vec::new())
}

/// Instances small enough to enumerate: up to five buffers over six steps, sizes 1–4,
/// alignments 1 or 2.
fn tiny_instances() -> impl proptest::strategy::Strategy<Value = Vec<Buffer>> {
    buffer_lists(6, 4, 5, 2, 6)
}

mod enumeration {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Every decision matches exhaustive enumeration, from one below the lower bound to the
        /// summed sizes: a pruning rule that cuts a feasible placement (the stranding cut among them)
        /// shows up as a false proof, an unsound plan as a failed verification.
        #[test]
        fn decisions_match_exhaustive_enumeration(
            b in tiny_instances()
        ) {
            let lb = lower_bound(&b);
            let total: u64 = b.iter().map(|x| x.size).sum();
            for cap in lb.saturating_sub(1)..=total {
                let expected = fits_by_enumeration(&b, cap);
                match decide(&b, cap, deadline(20)) {
                    Outcome::Found(offsets) => {
                        prop_assert!(expected, "found a plan within {} that enumeration rules out", cap);
                        verify(&b, &Plan::from_offsets(&b, offsets), Some(cap)).unwrap();
                    }
                    Outcome::Infeasible(why) => {
                        prop_assert!(!expected, "proved {} infeasible ({}) but a plan fits", cap, why)
                    }
                    Outcome::Timeout => prop_assert!(false, "tiny instance timed out"),
                }
            }
        }
    }
}

mod every_preorder {
    use proptest::prelude::*;

    use super::super::{Memo, PREORDERS, Prepared};
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Each static preorder alone, with and without exact cover for exactly-full parts, run
        /// to the end decides like exhaustive enumeration: every preorder of the portfolio is a
        /// complete search on its own.
        #[test]
        fn each_static_preorder_decides_like_enumeration(
            b in tiny_instances()
        ) {
            let p = Prepared::new(&b);
            let lb = lower_bound(&b);
            let total: u64 = b.iter().map(|x| x.size).sum();
            for cap in lb.saturating_sub(1)..=total {
                let expected = fits_by_enumeration(&b, cap);
                for pre in 0..PREORDERS {
                    for tiling in [false, true] {
                        let (mut memo, mut tiling_memo) = (Memo::default(), Memo::default());
                        let tiling = tiling.then_some((&mut tiling_memo, 0));
                        let got =
                            p.run(cap, pre, u64::MAX, deadline(20), &|| false, &mut memo, tiling);
                        match got {
                            Outcome::Found(offsets) => {
                                prop_assert!(expected, "preorder {} found a plan within {}", pre, cap);
                                verify(&b, &Plan::from_offsets(&b, offsets), Some(cap)).unwrap();
                            }
                            Outcome::Infeasible(why) => prop_assert!(
                                !expected, "preorder {} proved {} infeasible ({})", pre, cap, why
                            ),
                            Outcome::Timeout => prop_assert!(false, "tiny instance timed out"),
                        }
                    }
                }
            }
        }
    }
}

/// A randomised preorder once ranked two identical buffers against their id order; the twin rule
/// and the stack rule then excluded every way to fill a column only identical buffers fit, and
/// this perfect packing (a piece of six buffers live at time 0: five of size 1 and one of 11, in
/// a capacity of 16) was "proved" infeasible.
#[test]
fn randomised_preorders_keep_identical_buffers_in_id_order() {
    use super::super::{PackingDesc, PackingFamily};
    let desc = PackingDesc {
        count: 45,
        capacity: 16,
        horizon: 20,
        grid: 1,
        family: PackingFamily::Pinwheel,
        seed: 352,
    };
    let (b, _) = desc.generate();
    // Enough steps for many randomised runs; each must find the packing or stay undecided.
    let mut prover = Prover::new(&b, 0, 1);
    for _ in 0..64 {
        match prover.step(Some(16), 0, 0, deadline(5), &|| false) {
            Event::Found { .. } => return,
            Event::Proved { reason, .. } => panic!("false proof: {reason}"),
            _ => {}
        }
    }
    panic!("not found in 64 steps");
}

/// A probe's first step is the canonical search alone: on this exactly-full pinwheel the
/// exact cover's first run used up its 1000 nodes (90 ms) undecided, where the canonical search
/// finds the plan within them.
#[test]
fn a_probe_starts_with_the_canonical_search_alone() {
    use super::super::{PackingDesc, PackingFamily};
    let desc = PackingDesc {
        count: 100,
        capacity: 1 << 20,
        horizon: 1 << 20,
        grid: 1024,
        family: PackingFamily::Pinwheel,
        seed: 0,
    };
    let (b, _) = desc.generate();
    let mut prover = Prover::new(&b, 0, 1);
    match prover.step(Some(1 << 20), 0, 0, deadline(60), &|| false) {
        Event::Found { offsets, .. } => check_found(&b, 1 << 20, Outcome::Found(offsets)),
        other => panic!("the first step did not find the plan: {other:?}"),
    }
}

#[test]
fn order_twins_sorts_each_group_by_id() {
    let b = vec![
        Buffer::new(0, 2, 3), // 0, twin group A
        Buffer::new(0, 1, 1), // 1
        Buffer::new(0, 2, 3), // 2, group A
        Buffer::new(0, 1, 1), // 3, twin group B with 1
        Buffer::new(0, 2, 3), // 4, group A
    ];
    let p = super::Prepared::new(&b);
    let mut rank = vec![4, 3, 2, 1, 0];
    p.order_twins(&mut rank);
    // Group A (0, 2, 4) held ranks {4, 2, 0}; group B (1, 3) held {3, 1}.
    assert_eq!(rank, vec![0, 1, 2, 3, 4]);
}

#[test]
fn memo_remembers_fingerprints_of_word_sequences() {
    use super::memo::{Fingerprint, Memo};
    let key = |words: &[u64]| {
        let mut f = Fingerprint::new();
        words.iter().for_each(|&w| f.add(w));
        f.finish()
    };
    // Order, values and length all change the fingerprint.
    let keys = [
        key(&[1, 2]),
        key(&[2, 1]),
        key(&[1, 3]),
        key(&[1, 2, 0]),
        key(&[]),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
    let mut memo = Memo::default();
    assert!(!memo.failed(keys[0]));
    memo.record(keys[0]);
    assert!(memo.failed(keys[0]) && !memo.failed(keys[1]));
    memo.clear();
    assert!(!memo.failed(keys[0]));
}

#[test]
fn reasons_name_a_single_step_as_a_step_never_as_a_range() {
    use super::{Infeasibility, Live};
    assert_eq!(
        Live(3, 102, 102).to_string(),
        "the 3 buffers live at step 102"
    );
    assert_eq!(Live(1, 7, 7).to_string(), "the buffer live at step 7");
    assert_eq!(
        Live(4, 2, 9).to_string(),
        "the 4 buffers live between steps 2 and 9"
    );
    let search = Infeasibility::Search {
        buffers: 5,
        from: 102,
        to: 102,
    };
    assert_eq!(
        search.to_string(),
        "the exact search exhausted every canonical placement of the 5 buffers live at step 102 \
         without finding one"
    );
    let one = Infeasibility::Load {
        time: 4,
        load: 10,
        buffers: 1,
    };
    assert_eq!(one.to_string(), "the buffer live at step 4 needs 10 bytes");
}

#[test]
fn a_live_set_above_the_capacity_is_reported_with_its_count() {
    let b = Buffer::list(&[(0, 3, 4), (1, 3, 4), (2, 5, 4), (5, 6, 10)]);
    let prepared = super::Prepared::new(&b);
    assert_eq!(
        prepared.quick_infeasibility(11).map(|r| r.to_string()),
        Some("the 3 buffers live at step 2 need 12 bytes together".into())
    );
    // A buffer larger than the capacity on its own is named first.
    assert_eq!(
        prepared.quick_infeasibility(3).map(|r| r.to_string()),
        Some("buffer 0 alone needs 4 bytes".into())
    );
}
