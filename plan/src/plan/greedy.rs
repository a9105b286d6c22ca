//! Order-then-squeeze placement (the engine of every heuristic here) and the two classic greedies.
//!
//! [`Squeezer::place`] takes buffers in a given order and drops each into a gap among its
//! already-placed conflicts: the best-fitting gap (TFLite, XLA) or the lowest one (XLA's newer
//! option, idealloc's squeeze). Gaps start at 0, so the space below the lowest conflict counts;
//! XNNPACK misses it. [`greedy_by_size`] is that engine with TFLite's order, the baseline every
//! result is compared with.

use crate::time::Instant;

use super::events::Events;
use super::occupancy::Occupancy;
use super::{Buffer, Plan, validate};
use crate::Result;

pub use super::occupancy::Fit;

/// Offset marker for a buffer not placed yet.
const UNPLACED: u64 = u64::MAX;

/// Why [`Squeezer::place`] stopped before placing every buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `order[k]` pushed the peak above the cutoff.
    Cutoff(usize),
    /// The deadline passed.
    Deadline,
}

/// Reusable placement state for one instance: an [`Occupancy`] tree of the placed buffers, so
/// each placement costs O((g + 1) log² m) in the g free gaps below its placed conflicts, never
/// their number.
pub(crate) struct Squeezer<'a> {
    buffers: &'a [Buffer],
    placed: Occupancy,
    offsets: Vec<u64>,
}

impl<'a> Squeezer<'a> {
    /// For valid buffers.
    #[cfg(test)]
    pub fn new(buffers: &'a [Buffer]) -> Self {
        Self::with_events(buffers, &Events::new(buffers))
    }

    /// For valid buffers whose sorted endpoints are `events`: O(n) set-up.
    pub fn with_events(buffers: &'a [Buffer], events: &Events) -> Self {
        Squeezer {
            buffers,
            placed: Occupancy::new(events, buffers.len()),
            offsets: vec![UNPLACED; buffers.len()],
        }
    }

    /// Places `order` (a permutation of all buffers) one by one. Returns the offsets and the peak,
    /// or stops early: [`Stop::Cutoff`] as soon as the peak would exceed `cutoff`,
    /// [`Stop::Deadline`] when `deadline` passes (checked every 256 placements).
    pub fn place(
        &mut self,
        order: &[u32],
        fit: Fit,
        cutoff: u64,
        deadline: Option<Instant>,
    ) -> Result<(Vec<u64>, u64), Stop> {
        debug_assert_eq!(order.len(), self.buffers.len());
        self.offsets.fill(UNPLACED);
        self.placed.clear();
        let mut peak = 0u64;
        for (k, &i) in order.iter().enumerate() {
            if k % 256 == 255 && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Stop::Deadline);
            }
            let i = i as usize;
            let b = self.buffers[i];
            let offset = self.placed.choose(i, b.size, b.align, fit);
            let end = offset + b.size;
            if end > cutoff {
                return Err(Stop::Cutoff(k));
            }
            peak = peak.max(end);
            self.offsets[i] = offset;
            self.placed.insert(i, offset, end);
        }
        Ok((self.offsets.clone(), peak))
    }
}

/// Sorts ids by a key, with the id as the final tie-break (determinism).
pub(crate) fn order_by<K: Ord>(n: usize, key: impl Fn(usize) -> K) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by_key(|&i| (key(i as usize), i));
    order
}

/// TFLite's order: size descending, then lifetime length descending, then id.
pub(crate) fn size_order(buffers: &[Buffer]) -> Vec<u32> {
    order_by(buffers.len(), |i| {
        let b = &buffers[i];
        (
            std::cmp::Reverse(b.size),
            std::cmp::Reverse(b.upper - b.lower),
        )
    })
}

/// Greedy by size, the TFLite / XNNPACK baseline: largest buffer first (ties: longer lifetime, then
/// lower index), each into the smallest gap that fits among the time-overlapping buffers already
/// placed, the gap below the lowest one included; on top of the highest one when no gap fits.
///
/// Cost: O(n log² n) plus O(log² n) per free gap scanned below each buffer's placed conflicts
/// (an `Occupancy` tree over compressed time), independent of the number of conflicting pairs;
/// memory O(n log n) ranges at worst, far fewer as touching ranges merge.
///
/// # Errors
/// The validation errors of [`super::verify`] for invalid buffers (empty lifetime, zero size, bad
/// alignment, padded total beyond `u64`).
pub fn greedy_by_size(buffers: &[Buffer]) -> Result<Plan> {
    greedy_by_size_with(buffers, Fit::Best)
}

/// Greedy by size with either fit rule: [`Fit::Best`] is [`greedy_by_size`]; [`Fit::Lowest`]
/// (XLA's newer option) takes the lowest gap that fits instead, about half the cost per placement.
/// Both run to the end without a time limit: the unlimited baselines [`super::solve`]'s limited
/// answer is compared with.
///
/// # Errors
/// As [`greedy_by_size`].
pub fn greedy_by_size_with(buffers: &[Buffer], fit: Fit) -> Result<Plan> {
    let (events, _) = validate(buffers, 1)?;
    let order = size_order(buffers);
    let placed = Squeezer::with_events(buffers, &events).place(&order, fit, u64::MAX, None);
    debug_assert!(placed.is_ok(), "no cutoff, so placement always completes");
    let (offsets, peak) = placed.unwrap_or_default();
    Ok(Plan { offsets, peak })
}
