//! The arena pool's own peaks across its bottom pools: each bottom pool counts its reserved and
//! live bytes here as well as in its own statistics, so that the composition's peaks are the
//! peaks of the sums (the sum of each pool's peak would overstate them once two pools hold
//! memory). Relaxed atomics: a peak is the largest total any sequence of the changes reached.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::pool::device_pool::PoolStats;

/// Reserved and live bytes of all bottom pools of one arena pool, with their peaks.
#[derive(Debug, Default)]
pub(super) struct Totals {
    reserved: AtomicU64,
    peak_reserved: AtomicU64,
    in_use: AtomicU64,
    peak_in_use: AtomicU64,
}

fn change(now: &AtomicU64, peak: &AtomicU64, before: u64, after: u64) {
    if after >= before {
        let total = now.fetch_add(after - before, Relaxed) + (after - before);
        peak.fetch_max(total, Relaxed);
    } else {
        now.fetch_sub(before - after, Relaxed);
    }
}

impl Totals {
    /// A pool's reserved bytes went from `before` to `after`.
    pub(super) fn reserved(&self, before: u64, after: u64) {
        change(&self.reserved, &self.peak_reserved, before, after);
    }

    /// A pool's live bytes went from `before` to `after`.
    pub(super) fn in_use(&self, before: u64, after: u64) {
        change(&self.in_use, &self.peak_in_use, before, after);
    }

    /// `stats` (the sums of the bottom pools' statistics) with the peaks of the sums.
    pub(super) fn peaks(&self, stats: PoolStats) -> PoolStats {
        PoolStats {
            peak_reserved: self.peak_reserved.load(Relaxed),
            peak_in_use: self.peak_in_use.load(Relaxed),
            ..stats
        }
    }
}
