//! Instances and strategies shared by the planners' tests.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::{Buffer, PackingDesc, PackingFamily, Solution, SolveOptions, solve};

/// The gap example (the planning notes'): seven buffers whose load peaks at 4 bytes, while no
/// plan fits in 4 (LOAD 4, OPT 5; checked by hand and exhaustively). The notes' letters follow.
pub(crate) fn gap_example() -> Vec<Buffer> {
    vec![
        Buffer::new(0, 3, 2), // A
        Buffer::new(0, 1, 2), // D
        Buffer::new(2, 5, 1), // B
        Buffer::new(2, 7, 1), // G
        Buffer::new(4, 7, 1), // E
        Buffer::new(6, 8, 2), // C
        Buffer::new(7, 8, 2), // F
    ]
}

/// Lists of fewer than `count` buffers starting before `lower`, living fewer than `len` steps
/// (at least one), of sizes below `size` (at least 1), aligned to 2^a for `a < align_log`.
pub(crate) fn buffer_lists(
    lower: u64,
    len: u64,
    size: u64,
    align_log: u32,
    count: usize,
) -> impl proptest::strategy::Strategy<Value = Vec<Buffer>> {
    use proptest::prelude::*;
    prop::collection::vec(
        (0..lower, 1..len, 1..size, 0..align_log).prop_map(|(lower, len, size, a)| Buffer {
            lower,
            upper: lower + len,
            size,
            align: 1 << a,
        }),
        1..count,
    )
}

/// The decision at `capacity` with the default options otherwise.
pub(crate) fn decide(buffers: &[Buffer], capacity: u64) -> Solution {
    let opts = SolveOptions {
        capacity: Some(capacity),
        ..SolveOptions::default()
    };
    solve(buffers, &opts).unwrap()
}

/// Every packing family.
pub(crate) const FAMILIES: [PackingFamily; 3] = [
    PackingFamily::Guillotine,
    PackingFamily::LongAndShort,
    PackingFamily::Pinwheel,
];

/// A perfect packing of `count` buffers into 1 MiB over 1000 steps, on a 1024-cell grid.
pub(crate) fn mib_packing(count: usize, family: PackingFamily, seed: u64) -> PackingDesc {
    PackingDesc {
        count,
        capacity: 1 << 20,
        horizon: 1000,
        grid: 1024,
        family,
        seed,
    }
}
