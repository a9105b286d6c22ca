//! The exact-cover search against the canonical search: same decisions on exactly-full
//! instances, valid plans, and the bitset helpers.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::{Duration, Instant};

use super::super::super::fixtures::{FAMILIES, gap_example, mib_packing};
use super::super::super::{Buffer, Plan, lower_bound, verify};
use super::super::{Memo, Outcome, Prepared};
use super::{any_set, flip, next_bit, shift_or};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// A decision by the exact-cover search (every part here is exactly full at `capacity`).
fn by_tiling(buffers: &[Buffer], capacity: u64) -> Outcome {
    let p = Prepared::new(buffers);
    let (mut memo, mut sweep) = (Memo::default(), Memo::default());
    p.run(
        capacity,
        0,
        u64::MAX,
        far(),
        &|| false,
        &mut memo,
        Some((&mut sweep, 0)),
    )
}

/// A decision by the canonical search alone.
fn by_search(buffers: &[Buffer], capacity: u64) -> Outcome {
    let p = Prepared::new(buffers);
    let rank = p.rank(0).to_vec();
    p.run_ranked(
        capacity,
        &rank,
        u64::MAX,
        far(),
        &|| false,
        &mut Memo::default(),
    )
}

#[test]
fn sweeps_perfect_packings_of_every_family_to_their_bound() {
    for family in FAMILIES {
        for seed in 0..8 {
            let (b, _) = mib_packing(120, family, seed).generate();
            let cap = lower_bound(&b);
            let t = Instant::now();
            let o = by_tiling(&b, cap);
            let Outcome::Found(offsets) = o else {
                panic!(
                    "{family:?} seed {seed}: no plan at the bound: {o:?} {:?}",
                    t.elapsed()
                )
            };
            verify(&b, &Plan::from_offsets(&b, offsets), Some(cap)).unwrap();
        }
    }
}

/// Makes every time step of `buffers` (integer times in `0..horizon`) carry exactly the lower
/// bound by adding one-step buffers of size 1; they fit anywhere free, so the padded instance fits
/// the bound exactly when the original does, and every section of it is exactly full.
fn padded(mut buffers: Vec<Buffer>, horizon: u64) -> (Vec<Buffer>, u64) {
    let cap = lower_bound(&buffers);
    for t in 0..horizon {
        let load: u64 = buffers
            .iter()
            .filter(|b| b.lower <= t && t < b.upper)
            .map(|b| b.size)
            .sum();
        buffers.extend((load..cap).map(|_| Buffer::new(t, t + 1, 1)));
    }
    (buffers, cap)
}

#[test]
fn proves_the_padded_load_gap_example_infeasible() {
    let (b, cap) = padded(gap_example(), 8);
    assert_eq!(cap, 4);
    assert!(matches!(by_tiling(&b, cap), Outcome::Infeasible(_)));
}

/// Small instances padded to be exactly full, random ones (mostly feasible) and the load-gap
/// example with its sizes scaled and a random buffer over the whole horizon (infeasible): the exact-cover search must decide each like the canonical search, which is
/// complete, and its plans must be valid.
#[test]
fn decides_like_the_canonical_search_on_padded_instances() {
    let (mut feasible, mut infeasible) = (0, 0);
    let mut rng = crate::plan::rng::Rng::new(7);
    for seed in 0..400 {
        let n = 3 + rng.below(5) as usize;
        let mut b: Vec<Buffer> = (0..n)
            .map(|_| {
                let lower = rng.below(7);
                let upper = lower + 1 + rng.below(7 - lower);
                Buffer::new(lower, upper, 1 + rng.below(4))
            })
            .collect();
        if seed % 2 == 0 {
            let scale = 1 + rng.below(2);
            b.clear();
            b.extend(gap_example().into_iter().map(|mut g| {
                g.size *= scale;
                g
            }));
            b.push(Buffer::new(0, 8, 1 + rng.below(3)));
        }
        let (b, cap) = padded(b, 8);
        let (tiled, searched) = (by_tiling(&b, cap), by_search(&b, cap));
        match (&tiled, &searched) {
            (Outcome::Found(offsets), Outcome::Found(_)) => {
                verify(&b, &Plan::from_offsets(&b, offsets.clone()), Some(cap)).unwrap();
                feasible += 1;
            }
            (Outcome::Infeasible(_), Outcome::Infeasible(_)) => infeasible += 1,
            _ => panic!("case {seed}: exact cover {tiled:?}, canonical search {searched:?}"),
        }
    }
    assert!(
        feasible > 100 && infeasible >= 200,
        "{feasible} / {infeasible}"
    );
}

#[test]
fn shift_or_adds_shifted_sums() {
    let mut bits = vec![0u64; 3];
    bits[0] = 1;
    shift_or(&mut bits, 5);
    shift_or(&mut bits, 70);
    shift_or(&mut bits, 64);
    let set: Vec<usize> = (0..192)
        .filter(|&v| bits[v / 64] >> (v % 64) & 1 == 1)
        .collect();
    assert_eq!(set, [0, 5, 64, 69, 70, 75, 134, 139]);
    // Past the end: nothing changes.
    shift_or(&mut bits, 500);
    assert_eq!(bits.iter().map(|w| w.count_ones()).sum::<u32>(), 8);
}

#[test]
fn bit_ranges() {
    let mut row = vec![0u64; 3];
    flip(&mut row, 60, 130);
    assert!(any_set(&row, 0, 61) && !any_set(&row, 0, 60) && !any_set(&row, 130, 192));
    assert_eq!(next_bit(&row, 0, true), Some(60));
    assert_eq!(next_bit(&row, 60, false), Some(130));
    assert_eq!(next_bit(&row, 131, true), None);
    flip(&mut row, 64, 128);
    assert_eq!(row, [0xf << 60, 0, 3]);
}
