//! The occupancy tree against the quadratic placement it replaces: the previous greedy engine
//! (collect every placed conflict, sort by offset, scan the gaps), kept here as the oracle.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use proptest::prelude::*;

use super::super::fixtures::buffer_lists;
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

/// `count` buffers starting before `horizon`, living 1 to `len` steps, of 1 to `size` bytes,
/// aligned to 2^a for `a < align_log`.
fn random_buffers(
    seed: u64,
    count: usize,
    horizon: u64,
    len: u64,
    size: u64,
    align_log: u64,
) -> Vec<Buffer> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let l = rng.below(horizon);
            Buffer {
                lower: l,
                upper: l + 1 + rng.below(len),
                size: 1 + rng.below(size),
                align: 1 << rng.below(align_log),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn placement_matches_the_pairwise_oracle(
        buffers in buffer_lists(40, 25, 60, 4, 80),
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
    let b = Buffer::list(&[(0, 2, 5), (1, 3, 5), (0, 3, 1)]);
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
    let buffers = random_buffers(9, 2000, 1000, 200, 1000, 3);
    let order = size_order(&buffers);
    for fit in [Fit::Best, Fit::Lowest] {
        let want = oracle_place(&buffers, &order, fit);
        let (got, _) = Squeezer::new(&buffers)
            .place(&order, fit, u64::MAX, None)
            .unwrap();
        assert_eq!(got, want);
    }
}

/// Both fit rules on `buffers` in size order and in input order, against the oracle, verified.
fn assert_matches_oracle(buffers: &[Buffer]) -> Vec<Vec<u64>> {
    let mut squeezer = Squeezer::new(buffers);
    let input: Vec<u32> = (0..buffers.len() as u32).collect();
    let mut plans = Vec::new();
    for order in [size_order(buffers), input] {
        for fit in [Fit::Best, Fit::Lowest] {
            let want = oracle_place(buffers, &order, fit);
            let (got, peak) = squeezer.place(&order, fit, u64::MAX, None).unwrap();
            assert_eq!(got, want, "{fit:?}");
            let plan = Plan::from_offsets(buffers, got.clone());
            assert_eq!(plan.peak, peak);
            verify(buffers, &plan, None).unwrap();
            plans.push(got);
        }
    }
    plans
}

#[test]
fn every_alignment_up_to_64_kib_matches_the_oracle() {
    // Alignments 1 B to 64 KiB mixed with sizes that are not multiples of them, so the aligned
    // start of a gap lies inside it and a gap can hold the size only when unaligned.
    let buffers = random_buffers(17, 400, 200, 40, 100_000, 17);
    let plans = assert_matches_oracle(&buffers);
    for offsets in plans {
        for (b, o) in buffers.iter().zip(offsets) {
            assert!(
                o.is_multiple_of(b.align),
                "offset {o} for align {}",
                b.align
            );
        }
    }
}

#[test]
fn a_gap_long_enough_only_when_unaligned_is_skipped() {
    // A [0, 6) and C [16, 20) leave the 10-byte gap [6, 16) to buffers alive after B ends. D
    // (8 bytes aligned to 16) would start at 16 there and overlap C, so it goes on top, at
    // align_up(20, 16) = 32; E (8 bytes, unaligned) takes the gap, the smallest that fits.
    let aligned = |lower, upper, size, align| Buffer {
        lower,
        upper,
        size,
        align,
    };
    let b = [
        Buffer::new(0, 4, 6),
        Buffer::new(0, 2, 10),
        Buffer::new(0, 4, 4),
        aligned(2, 4, 8, 16),
        Buffer::new(2, 4, 8),
    ];
    let (offsets, peak) = Squeezer::new(&b)
        .place(&[0, 1, 2, 3, 4], Fit::Best, u64::MAX, None)
        .unwrap();
    assert_eq!((offsets, peak), (vec![0, 6, 16, 32, 6], 40));
    // Aligned to 2 instead, D fits the gap at 6.
    let mut b2 = b;
    b2[3].align = 2;
    let (offsets, _) = Squeezer::new(&b2)
        .place(&[0, 1, 2, 3, 4], Fit::Best, u64::MAX, None)
        .unwrap();
    assert_eq!(offsets[3], 6);
    assert_matches_oracle(&b);
    assert_matches_oracle(&b2);
}

#[test]
fn sizes_near_u64_max_place_without_false_overflow() {
    let half = 1u64 << 63;
    // Never alive together: both at 0, whatever their sizes.
    let apart = [Buffer::new(0, 1, u64::MAX), Buffer::new(1, 2, u64::MAX)];
    assert_eq!(assert_matches_oracle(&apart)[0], vec![0, 0]);
    // Alive together, summing to exactly u64::MAX: the second ends at the last byte.
    let together = [Buffer::new(0, 2, half), Buffer::new(1, 3, half - 1)];
    let (offsets, peak) = Squeezer::new(&together)
        .place(&[0, 1], Fit::Best, u64::MAX, None)
        .unwrap();
    assert_eq!((offsets, peak), (vec![0, half], u64::MAX));
    assert_matches_oracle(&together);
    // The aligned top of a huge buffer: 3·2^61 rounds up to 2^63 for a 2^62 alignment, and a
    // buffer alive once the first has ended reuses offset 0, below the aligned one.
    let aligned = [
        Buffer::new(0, 2, 3 << 61),
        Buffer {
            lower: 1,
            upper: 3,
            size: 1 << 61,
            align: 1 << 62,
        },
        Buffer::new(2, 4, 1 << 62),
    ];
    let plans = assert_matches_oracle(&aligned);
    assert_eq!(plans[0], vec![0, half, 0]);
    // A gap test near the top must not wrap: candidate + size saturates instead.
    let near_top = [
        Buffer::new(0, 2, half),
        Buffer::new(0, 2, (half - 1) / 2),
        Buffer::new(1, 2, half / 2),
    ];
    assert_matches_oracle(&near_top);
}

#[test]
fn buffers_alive_at_one_step_stack_and_touching_lifetimes_share() {
    // Ten buffers alive only at step 5 conflict pairwise; the ones alive only at steps 4 and 6
    // touch them (half-open lifetimes), so they reuse offset 0.
    let mut b: Vec<Buffer> = (0..10).map(|i| Buffer::new(5, 6, 1 + i)).collect();
    b.push(Buffer::new(4, 5, 100));
    b.push(Buffer::new(6, 7, 100));
    let plans = assert_matches_oracle(&b);
    // Size order, best fit: sizes 10 down to 1 stacked, total 55.
    let offsets = &plans[0];
    assert_eq!((offsets[10], offsets[11]), (0, 0));
    let stacked = offsets[..10].iter().zip(&b).map(|(o, x)| o + x.size).max();
    assert_eq!(stacked, Some(55));
}
