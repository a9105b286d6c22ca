use proptest::prelude::*;

use super::*;

/// Applies one operation to the bitmap and to a `Vec<bool>` model.
fn apply(u: &mut Units, m: &mut Vec<bool>, other: &Units, om: &[bool], op: (u8, u64, u64)) {
    let len = m.len() as u64;
    let (kind, x, y) = op;
    let (a, b) = if len == 0 {
        (0, 0)
    } else {
        let (a, b) = (x % (len + 1), y % (len + 1));
        (a.min(b), a.max(b))
    };
    match kind % 5 {
        0 => {
            u.set(a, b);
            m[a as usize..b as usize].fill(true);
        }
        1 => {
            let cleared = u.clear(a, b);
            let want = m[a as usize..b as usize].iter().filter(|b| **b).count() as u64;
            assert_eq!(cleared, want, "clear counts the granules it cleared");
            m[a as usize..b as usize].fill(false);
        }
        2 => {
            let newly = u.set_where(other, a, b);
            let want = (a..b)
                .filter(|i| om[*i as usize] && !m[*i as usize])
                .count() as u64;
            assert_eq!(newly, want, "set_where counts the granules it set");
            for i in a..b {
                m[i as usize] |= om[i as usize];
            }
        }
        3 => {
            let new = x % 300;
            u.resize(new, y % 2 == 0);
            m.resize(new as usize, y % 2 == 0);
        }
        _ => {}
    }
}

proptest! {
    /// Every operation agrees with a `Vec<bool>`, and so do the counts, searches and runs.
    #[test]
    fn units_match_a_vec_of_bools(ops in prop::collection::vec((0u8..5, 0u64..400, 0u64..400), 1..60)) {
        let mut other = Units::default();
        other.resize(300, false);
        for i in (0..300).step_by(3) {
            other.set(i, i + 1);
        }
        let om: Vec<bool> = (0..300).map(|i| i % 3 == 0).collect();
        let mut u = Units::default();
        let mut m = Vec::new();
        u.resize(130, false);
        m.resize(130, false);
        for op in ops {
            apply(&mut u, &mut m, &other, &om, op);
            let len = m.len() as u64;
            prop_assert_eq!(u.len(), len);
            prop_assert_eq!(u.ones(), m.iter().filter(|b| **b).count() as u64);
            let (a, b) = ((op.1 % (len + 1)).min(op.2 % (len + 1)), (op.1 % (len + 1)).max(op.2 % (len + 1)));
            let want = m[a as usize..b as usize].iter().filter(|b| **b).count() as u64;
            prop_assert_eq!(u.count(a, b), want);
            prop_assert_eq!(u.all(a, b), want == b - a);
            for value in [true, false] {
                let next = (a..b).find(|i| m[*i as usize] == value);
                prop_assert_eq!(u.next(a, b, value), next);
                let runs: Vec<_> = u.runs(a, b, value).collect();
                let covered: u64 = runs.iter().map(|(s, e)| e - s).sum();
                prop_assert_eq!(covered, (a..b).filter(|i| m[*i as usize] == value).count() as u64);
                for (s, e) in runs {
                    prop_assert!((s..e).all(|i| m[i as usize] == value));
                }
            }
            for i in 0..len {
                prop_assert_eq!(u.get(i), m[i as usize]);
            }
        }
    }
}

#[test]
fn masks_cover_word_edges() {
    let mut u = Units::default();
    u.resize(200, false);
    u.set(63, 129);
    assert_eq!(u.count(0, 200), 66);
    assert_eq!(u.runs(0, 200, true).collect::<Vec<_>>(), vec![(63, 129)]);
    assert_eq!(u.next(64, 200, false), Some(129));
    u.resize(64, false);
    assert_eq!((u.ones(), u.count(0, 64)), (1, 1));
    u.resize(128, true);
    assert_eq!(u.runs(0, 128, true).collect::<Vec<_>>(), vec![(63, 128)]);
}

#[test]
fn flipped_counts_match_population_counts() {
    let runs = (0..64).flat_map(|lo| (lo + 1..=64).map(move |hi| (lo, hi)));
    for (lo, hi) in runs {
        let run = (!0u64 >> (64 - (hi - lo))) << lo;
        assert_eq!(
            flipped_count(run),
            u64::from(run.count_ones()),
            "{lo}..{hi}"
        );
    }
    for scattered in [0b101u64, 1 | 1 << 63, 0x5555_5555_5555_5555, !0 ^ 1 << 7] {
        assert_eq!(flipped_count(scattered), u64::from(scattered.count_ones()));
    }
}
