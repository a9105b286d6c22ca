//! Nogood memo: fingerprints of search states proved to have no completion.
//!
//! The canonical search reaches the same subproblem along many paths: after a decomposition the
//! pieces are solved one after the other, so when a later piece fails the parent tries its next
//! candidate, which often leaves that piece exactly as it was and makes it fail again; and
//! different arrangements of the placed buffers often leave the same `min_offset` profile for the
//! unplaced ones. A subproblem's outcome depends only on its unplaced buffers, their `min_offset`s,
//! the canonical-order constraint from its parent and the placed same-lifetime buffers the stack
//! symmetry looks at (see `Search::fingerprint`), so a failure proved once is reused at once.
//!
//! States are stored as 128-bit fingerprints: the chance that two of a million states collide is
//! about 2^-88, far below that of a hardware error. Failures are facts about the capacity and the
//! static rank, so a memo is kept across the restarts of one probe under one preorder.

use std::collections::HashSet;

/// Entries a memo keeps by default (16 bytes each plus the table: about 40 MiB); past its limit
/// new failures are no longer recorded, the ones recorded still prune.
pub(crate) const MAX_ENTRIES: usize = 1 << 20;

/// A set of failed-state fingerprints for one (capacity, rank).
#[derive(Debug)]
pub(crate) struct Memo {
    failed: HashSet<u128>,
    limit: usize,
}

impl Default for Memo {
    fn default() -> Self {
        Memo::with_limit(MAX_ENTRIES)
    }
}

impl Memo {
    /// An empty memo that records at most `limit` failures.
    pub(crate) fn with_limit(limit: usize) -> Self {
        Memo {
            failed: HashSet::new(),
            limit,
        }
    }

    /// Whether the state with this fingerprint was proved to have no completion.
    pub(super) fn failed(&self, key: u128) -> bool {
        self.failed.contains(&key)
    }

    /// Records a state proved to have no completion.
    pub(super) fn record(&mut self, key: u128) {
        if self.failed.len() < self.limit {
            self.failed.insert(key);
        }
    }

    /// Forgets everything (a new capacity or rank).
    pub(crate) fn clear(&mut self) {
        self.failed.clear();
    }
}

/// A 128-bit fingerprint built word by word: two independent lanes, each a bijective
/// SplitMix64-style mix of the previous lane value and the word.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fingerprint(u64, u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Fingerprint {
    pub(super) fn new() -> Self {
        Fingerprint(0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344)
    }

    pub(super) fn add(&mut self, word: u64) {
        self.0 = mix(self.0 ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.1 = mix(self.1.wrapping_add(word.rotate_left(29)) ^ 0xa409_3822_299f_31d0);
    }

    pub(super) fn finish(self) -> u128 {
        (u128::from(self.0) << 64) | u128::from(self.1)
    }
}
