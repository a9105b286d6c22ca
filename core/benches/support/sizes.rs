//! The seeded tensor sizes the pool benchmarks allocate: a transformer-like step of many small
//! and medium tensors, the same sequence in every run.

/// The seed of the size sequence (a benchmark's threads each mix their index into it).
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// `n` sizes from `seed` by xorshift64, each `256 << (x % 12)`: 256 B .. 512 KiB.
pub fn sizes(seed: u64, n: usize) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            256 << (x % 12)
        })
        .collect()
}
