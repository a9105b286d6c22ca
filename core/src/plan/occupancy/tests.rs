//! The occupancy tree against the quadratic placement it replaces: the previous greedy engine
//! (collect every placed conflict, sort by offset, scan the gaps), kept here as the oracle.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use proptest::prelude::*;

use super::super::greedy::{Squeezer, Stop, size_order};
use super::super::rng::Rng;
use super::super::{Buffer, Plan, align_up, verify};
use super::Fit;

/// The old engine's gap choice among placed ranges sorted by start.
fn oracle_choose(placed: &[(u64, u64)], size: u64, align: u64, fit: Fit) -> u64 {
    let mut prev_end = 0u64;
    let mut best: Option<(u64, u64)> = None;
    for &(o, e) in placed {
        let cand = align_up(prev_end, align);
        if o >= cand && o - cand >= size {
            match fit {
                Fit::Lowest => return cand,
                Fit::Best => {
                    let len = o - cand;
                    if best.is_none_or(|(bl, _)| len < bl) {
                        best = Some((len, cand));
                    }
                }
            }
        }
        prev_end = prev_end.max(e);
    }
    best.map_or(align_up(prev_end, align), |(_, o)| o)
}

/// The old O(n·K) placement of `order`, pairwise conflicts and all.
fn oracle_place(buffers: &[Buffer], order: &[u32], fit: Fit) -> Vec<u64> {
    let mut offsets = vec![u64::MAX; buffers.len()];
    for &i in order {
        let b = buffers[i as usize];
        let mut gaps: Vec<(u64, u64)> = buffers
            .iter()
            .zip(&offsets)
            .filter(|&(c, &o)| o != u64::MAX && c.conflicts(&b))
            .map(|(c, &o)| (o, o + c.size))
            .collect();
        gaps.sort_unstable_by_key(|g| g.0);
        offsets[i as usize] = oracle_choose(&gaps, b.size, b.align, fit);
    }
    offsets
}

fn buffer() -> impl Strategy<Value = Buffer> {
    (0u64..40, 1u64..25, 1u64..60, 0u32..4).prop_map(|(lower, len, size, a)| Buffer {
        lower,
        upper: lower + len,
        size,
        align: 1 << a,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn placement_matches_the_pairwise_oracle(
        buffers in prop::collection::vec(buffer(), 1..80),
        seed in 0u64..1_000_000,
    ) {
        let mut rng = Rng::new(seed);
        let mut random: Vec<u32> = (0..buffers.len() as u32).collect();
        for k in (1..random.len()).rev() {
            random.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let mut squeezer = Squeezer::new(&buffers);
        for order in [size_order(&buffers), random] {
            for fit in [Fit::Best, Fit::Lowest] {
                let want = oracle_place(&buffers, &order, fit);
                let (got, peak) = squeezer.place(&order, fit, u64::MAX, None).unwrap();
                prop_assert_eq!(&got, &want);
                let want_peak = buffers.iter().zip(&want).map(|(b, &o)| o + b.size).max().unwrap();
                prop_assert_eq!(peak, want_peak);
                let plan = Plan::from_offsets(&buffers, got);
                prop_assert!(verify(&buffers, &plan, None).is_ok());
            }
        }
    }
}

#[test]
fn cutoff_reports_the_breaking_buffer() {
    let b = [
        Buffer::new(0, 2, 5),
        Buffer::new(1, 3, 5),
        Buffer::new(0, 3, 1),
    ];
    let mut s = Squeezer::new(&b);
    assert_eq!(
        s.place(&[0, 1, 2], Fit::Best, 10, None),
        Err(Stop::Cutoff(2))
    );
    assert_eq!(s.place(&[0, 1, 2], Fit::Best, 11, None).unwrap().1, 11);
}

#[test]
fn a_passed_deadline_stops_placement() {
    let b: Vec<Buffer> = (0..1000)
        .map(|i| Buffer::new(i, i + 10, 1 + i % 7))
        .collect();
    let order = size_order(&b);
    let past = std::time::Instant::now();
    let mut s = Squeezer::new(&b);
    assert_eq!(
        s.place(&order, Fit::Best, u64::MAX, Some(past)),
        Err(Stop::Deadline)
    );
    assert!(s.place(&order, Fit::Best, u64::MAX, None).is_ok());
}

#[test]
fn many_long_lived_conflicts_stay_exact() {
    // Wide live sets (every buffer conflicts with about 200 others): the regime the tree is for.
    let mut rng = Rng::new(9);
    let buffers: Vec<Buffer> = (0..2000)
        .map(|_| {
            let l = rng.below(1000);
            Buffer {
                lower: l,
                upper: l + 1 + rng.below(200),
                size: 1 + rng.below(1000),
                align: 1 << rng.below(3),
            }
        })
        .collect();
    let order = size_order(&buffers);
    for fit in [Fit::Best, Fit::Lowest] {
        let want = oracle_place(&buffers, &order, fit);
        let (got, _) = Squeezer::new(&buffers)
            .place(&order, fit, u64::MAX, None)
            .unwrap();
        assert_eq!(got, want);
    }
}
