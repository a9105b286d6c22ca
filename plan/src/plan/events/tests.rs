use super::*;
use crate::plan::rng::Rng;

fn random(n: usize, horizon: u64, seed: u64) -> Vec<Buffer> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let l = rng.below(horizon);
            Buffer::new(l, l + 1 + rng.below(horizon / 4 + 1), 1 + rng.below(8))
        })
        .collect()
}

/// The order by comparison: time, frees first, allocations largest first, then id.
fn expected(buffers: &[Buffer]) -> Vec<Event> {
    let mut want: Vec<Event> = (0..buffers.len() as u32)
        .flat_map(|id| {
            let b = &buffers[id as usize];
            [
                Event {
                    time: b.lower,
                    alloc: true,
                    id,
                    size: b.size,
                    align: b.align,
                    opened: 0,
                },
                Event {
                    time: b.upper,
                    alloc: false,
                    id,
                    size: b.size,
                    align: 1,
                    opened: 0,
                },
            ]
        })
        .collect();
    want.sort_by_key(|e| {
        let size = if e.alloc { e.size } else { 0 };
        (e.time, e.alloc, std::cmp::Reverse(size), e.id)
    });
    // A free names its allocation by rank.
    let mut rank = vec![0; buffers.len()];
    let mut allocs = 0;
    for e in &mut want {
        if e.alloc {
            rank[e.id as usize] = allocs;
            allocs += 1;
        } else {
            e.opened = rank[e.id as usize];
        }
    }
    want
}

#[test]
fn radix_order_matches_a_comparison_sort() {
    for (n, horizon, seed) in [
        (0, 1, 0),
        (1, 1, 1),
        (50, 10, 2),
        (3000, 1 << 20, 3),
        (500, 7, 4),
    ] {
        let b = random(n, horizon, seed);
        let got: Vec<Event> = Events::new(&b).iter().collect();
        assert_eq!(got, expected(&b), "n {n} horizon {horizon}");
    }
    // Times spread over all 64 bits take the comparison fallback.
    let b = [
        Buffer::new(0, u64::MAX, 3),
        Buffer::new(5, 6, 9),
        Buffer::new(u64::MAX - 2, u64::MAX, 4),
        Buffer::new(5, 1 << 63, 4),
    ];
    let got: Vec<Event> = Events::new(&b).iter().collect();
    assert_eq!(got, expected(&b));
}

/// The radix keys carry each allocation's alignment below the id: every alignment up to 2^62
/// comes back on its allocation, frees keep 1.
#[test]
fn radix_keys_carry_alignments() {
    let mut rng = Rng::new(7);
    let b: Vec<Buffer> = random(2000, 500, 8)
        .into_iter()
        .map(|b| Buffer {
            align: 1 << rng.below(63),
            ..b
        })
        .collect();
    let got: Vec<Event> = Events::new(&b).iter().collect();
    assert_eq!(got, expected(&b));
}

#[test]
fn load_groups_and_spans_match_brute_force() {
    let b = random(400, 300, 5);
    let e = Events::new(&b);
    let times: std::collections::BTreeSet<u64> =
        b.iter().flat_map(|b| [b.lower, b.upper]).collect();
    let load_at = |t: u64| -> u64 {
        b.iter()
            .filter(|x| x.lower <= t && t < x.upper)
            .map(|x| x.size)
            .sum()
    };
    let lb = times.iter().map(|&t| load_at(t)).max().unwrap();
    let (load, at) = e.peak_load();
    assert_eq!((load, load_at(at)), (lb, lb));
    let times: Vec<u64> = times.into_iter().collect();
    let (span, segments) = e.spans(b.len());
    assert_eq!(segments, times.len() - 1);
    for (x, &(f, l)) in b.iter().zip(&span) {
        assert_eq!((times[f as usize], times[l as usize]), (x.lower, x.upper));
    }
    // Two groups that touch at time 10 are apart (half-open lifetimes).
    let g = [
        Buffer::new(0, 10, 5),
        Buffer::new(3, 10, 6),
        Buffer::new(10, 20, 7),
        Buffer {
            align: 4,
            ..Buffer::new(12, 30, 1)
        },
    ];
    assert_eq!(Events::new(&g).worst_group(), (11, 2));
    assert_eq!(Events::new(&g[2..]).worst_group(), (11, 2));
}

/// Sorting on several threads gives the one order, ranks, load and group totals, whatever the
/// time range (one bucket digit or two, two low passes, buckets sorted by comparison), wherever
/// the threads' runs of buckets split groups, and with frees whose allocation another thread
/// ranks.
#[test]
fn threads_sort_as_one_does() {
    let mut rng = Rng::new(11);
    let cases: Vec<Vec<Buffer>> = vec![
        random(5000, 3000, 12),
        random(5000, 1 << 16, 13),
        random(4000, 1 << 30, 14),
        random(3000, 40, 15),
        // Short-lived: many groups, runs split between and inside them.
        (0..4000)
            .map(|i| {
                let l = i / 3 * 7 + rng.below(3);
                Buffer {
                    align: 1 << rng.below(5),
                    ..Buffer::new(l, l + 1 + rng.below(9), 1 + rng.below(100))
                }
            })
            .collect(),
        // Long-lived: most frees far after their allocation.
        (0..3000)
            .map(|i| Buffer::new(i, 3000 + rng.below(3000), 1 + rng.below(1 << 40)))
            .collect(),
    ];
    for b in &cases {
        let want = expected(b);
        let one = Events::new(b);
        for threads in 1..=4 {
            let e = Events::on(b, threads);
            let got: Vec<Event> = e.iter().collect();
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            assert_eq!((got.len(), first), (want.len(), None), "{threads} threads");
            assert_eq!(e.peak_load(), one.peak_load(), "{threads} threads");
            assert_eq!(e.worst_group(), one.worst_group(), "{threads} threads");
        }
    }
}

/// The load and group totals on several threads match brute force.
#[test]
fn threads_measure_load_and_groups() {
    let mut rng = Rng::new(21);
    let b: Vec<Buffer> = (0..3000)
        .map(|i| {
            let l = i / 4 * 5 + rng.below(4);
            Buffer::new(l, l + 1 + rng.below(12), 1 + rng.below(50))
        })
        .collect();
    // Groups: sort by lower, merge overlapping lifetimes.
    let mut by_lower: Vec<&Buffer> = b.iter().collect();
    by_lower.sort_by_key(|x| x.lower);
    let (mut worst, mut group, mut end) = ((0u128, 0usize), (0u128, 0usize), 0u64);
    for x in by_lower {
        if x.lower >= end {
            group = (0, 0);
        }
        end = end.max(x.upper);
        group = (
            group.0 + x.size as u128 + (x.align - 1) as u128,
            group.1 + 1,
        );
        worst = worst.max(group);
    }
    let load_at = |t: u64| -> u64 {
        b.iter()
            .filter(|x| x.lower <= t && t < x.upper)
            .map(|x| x.size)
            .sum()
    };
    let lb = b.iter().map(|x| load_at(x.lower)).max().unwrap();
    for threads in 1..=4 {
        let e = Events::on(&b, threads);
        assert_eq!(e.worst_group(), worst, "{threads} threads");
        let (load, at) = e.peak_load();
        assert_eq!((load, load_at(at)), (lb, lb), "{threads} threads");
    }
}
