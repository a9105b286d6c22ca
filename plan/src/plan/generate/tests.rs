//! Every family yields a perfect packing: the witness is valid at capacity and the bound is tight.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::super::fixtures::{FAMILIES, mib_packing};
use super::super::{Plan, lower_bound, verify};
use super::{PackingDesc, PackingFamily};

#[test]
fn every_family_is_a_perfect_packing_on_its_grid() {
    for family in FAMILIES {
        for seed in 0..20 {
            let desc = mib_packing(120, family, seed);
            let (b, witness) = desc.generate();
            assert_eq!(b.len(), 120, "{family:?} seed {seed}");
            assert!(b.iter().all(|x| x.size % 1024 == 0), "{family:?}");
            assert!(witness.iter().all(|o| o % 1024 == 0), "{family:?}");
            assert_eq!(lower_bound(&b), 1 << 20, "{family:?} seed {seed}");
            let area: u128 = b
                .iter()
                .map(|x| (x.upper - x.lower) as u128 * x.size as u128)
                .sum();
            assert_eq!(area, 1000 * (1 << 20), "the pieces tile the rectangle");
            verify(&b, &Plan::from_offsets(&b, witness), Some(1 << 20)).unwrap();
            assert_eq!(desc.generate().0, b, "equal descriptions, equal instances");
        }
    }
}

#[test]
fn long_and_short_mixes_long_large_with_short_small_buffers() {
    let desc = mib_packing(200, PackingFamily::LongAndShort, 3);
    let (b, _) = desc.generate();
    let long = b.iter().filter(|x| x.upper - x.lower >= 333).count();
    let short = b.iter().filter(|x| x.upper - x.lower < 100).count();
    assert!(long >= 2 && short >= 100, "long {long}, short {short}");
}

#[test]
fn pinwheels_appear_and_small_rectangles_stop_early() {
    let desc = mib_packing(300, PackingFamily::Pinwheel, 5);
    assert_ne!(
        desc.generate().0,
        PackingDesc {
            family: PackingFamily::Guillotine,
            ..desc
        }
        .generate()
        .0
    );
    // A 2 × 2 grid has 4 cells: asking for more yields at most 4 buffers, still a packing.
    let tiny = PackingDesc {
        count: 50,
        capacity: 2048,
        horizon: 2,
        grid: 1024,
        ..desc
    };
    let (b, witness) = tiny.generate();
    assert!(b.len() <= 4);
    verify(&b, &Plan::from_offsets(&b, witness), Some(2048)).unwrap();
}
