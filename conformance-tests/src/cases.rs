//! The cases, written once against the core contract.

use crate::Case;

mod graphs;
mod memory;
mod ops;
mod staging;

/// A small deterministic generator (xorshift64*), so failures replay.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub(crate) fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Every case, in report order.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(memory::cases());
    v.extend(staging::cases());
    v.extend(ops::cases());
    v.extend(graphs::cases());
    v
}
