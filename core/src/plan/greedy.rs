//! Order-then-squeeze placement (the engine of every heuristic here) and the two classic greedies.
//!
//! [`Squeezer::place`] takes buffers in a given order and drops each into a gap among its
//! already-placed conflicts: the best-fitting gap (TFLite, XLA) or the lowest one (XLA's newer
//! option, idealloc's squeeze). Gaps start at 0, so the space below the lowest conflict counts;
//! XNNPACK misses it. [`greedy_by_size`] is that engine with TFLite's order, the baseline every
//! result is compared with. [`sweep_best_fit`] is XLA's fast pass: an online best-fit allocator
//! simulated in time order, O(n log n).

use std::collections::{BTreeMap, BTreeSet};

use super::index::IntervalIndex;
use super::{Buffer, Plan, align_up, validate};
use crate::Result;

/// How a buffer picks its gap among the placed conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Smallest gap between placed conflicts (or below the lowest) that fits; otherwise on top of
    /// the highest conflict (TFLite's rule).
    Best,
    /// Lowest offset that fits.
    Lowest,
}

/// Offset marker for a buffer not placed yet.
const UNPLACED: u64 = u64::MAX;

/// Reusable placement state for one instance. Conflicts come from an interval index that only
/// holds placed buffers, so each query costs O((k + 1) log n) in the k *placed* conflicts.
pub(crate) struct Squeezer<'a> {
    buffers: &'a [Buffer],
    placed: IntervalIndex,
    offsets: Vec<u64>,
    gaps: Vec<(u64, u64)>,
}

impl<'a> Squeezer<'a> {
    pub fn new(buffers: &'a [Buffer]) -> Self {
        Squeezer {
            buffers,
            placed: IntervalIndex::empty(buffers),
            offsets: vec![UNPLACED; buffers.len()],
            gaps: Vec::new(),
        }
    }

    /// Places `order` (a permutation of all buffers) one by one. Returns the offsets and the peak,
    /// or, as soon as the peak would exceed `cutoff`, `Err(k)` with `order[k]` the buffer that broke it.
    pub fn place(
        &mut self,
        order: &[u32],
        fit: Fit,
        cutoff: u64,
    ) -> Result<(Vec<u64>, u64), usize> {
        debug_assert_eq!(order.len(), self.buffers.len());
        self.offsets.fill(UNPLACED);
        self.placed.clear();
        let mut peak = 0u64;
        for (k, &i) in order.iter().enumerate() {
            let i = i as usize;
            let b = self.buffers[i];
            self.gaps.clear();
            let (offsets, gaps) = (&self.offsets, &mut self.gaps);
            let buffers = self.buffers;
            self.placed.for_each_overlap(b.lower, b.upper, |j| {
                let o = offsets[j as usize];
                debug_assert_ne!(o, UNPLACED);
                gaps.push((o, o + buffers[j as usize].size));
            });
            self.gaps.sort_unstable_by_key(|g| g.0);
            let offset = choose(&self.gaps, b.size, b.align, fit);
            let end = offset + b.size;
            if end > cutoff {
                return Err(k);
            }
            peak = peak.max(end);
            self.offsets[i] = offset;
            self.placed.activate(i);
        }
        Ok((self.offsets.clone(), peak))
    }
}

/// Picks an offset for a buffer of `size`/`align` among placed ranges sorted by start.
#[inline]
fn choose(placed: &[(u64, u64)], size: u64, align: u64, fit: Fit) -> u64 {
    let mut prev_end = 0u64;
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    for &(o, e) in placed {
        let cand = align_up(prev_end, align);
        if o >= cand && o - cand >= size {
            match fit {
                Fit::Lowest => return cand,
                Fit::Best => {
                    let len = o - cand;
                    if best.is_none_or(|(bl, _)| len < bl) {
                        best = Some((len, cand));
                    }
                }
            }
        }
        prev_end = prev_end.max(e);
    }
    let top = align_up(prev_end, align);
    best.map_or(top, |(_, o)| o)
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
/// Cost: O(n log n + K log K) with K the number of conflicting pairs (each smaller buffer meets
/// its larger placed conflicts once, through an interval index of placed buffers); memory O(n).
///
/// # Errors
/// The validation errors of [`super::verify`] for invalid buffers (empty lifetime, zero size, bad
/// alignment, padded total beyond `u64`).
pub fn greedy_by_size(buffers: &[Buffer]) -> Result<Plan> {
    validate(buffers)?;
    Ok(greedy_unchecked(buffers))
}

/// [`greedy_by_size`] on validated buffers.
pub(crate) fn greedy_unchecked(buffers: &[Buffer]) -> Plan {
    let order = size_order(buffers);
    let placed = Squeezer::new(buffers).place(&order, Fit::Best, u64::MAX);
    debug_assert!(placed.is_ok(), "no cutoff, so placement always completes");
    let (offsets, peak) = placed.unwrap_or_default();
    Plan { offsets, peak }
}

/// XLA's fast pass: walk allocations and frees in time order (frees first at equal times) and serve
/// each allocation from the best-fitting free range of an online allocator whose top grows when
/// nothing fits. O(n log n) whatever the number of conflicts.
pub(crate) fn sweep_best_fit(buffers: &[Buffer]) -> Plan {
    let mut events: Vec<(u64, bool, std::cmp::Reverse<u64>, u32)> =
        Vec::with_capacity(buffers.len() * 2);
    for (i, b) in buffers.iter().enumerate() {
        events.push((b.lower, true, std::cmp::Reverse(b.size), i as u32));
        events.push((b.upper, false, std::cmp::Reverse(b.size), i as u32));
    }
    events.sort_unstable();
    // Free ranges by offset (offset -> length) and by (length, offset) for best fit.
    let mut by_offset: BTreeMap<u64, u64> = BTreeMap::new();
    let mut by_len: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut top = 0u64;
    let mut offsets = vec![0u64; buffers.len()];
    let mut peak = 0u64;
    for (_, alloc, _, i) in events {
        let b = buffers[i as usize];
        if !alloc {
            // Free [o, o + size), coalescing with neighbours and the top.
            let (mut o, mut len) = (offsets[i as usize], b.size);
            if let Some((&po, &pl)) = by_offset.range(..o).next_back()
                && po + pl == o
            {
                by_offset.remove(&po);
                by_len.remove(&(pl, po));
                o = po;
                len += pl;
            }
            if let Some(&nl) = by_offset.get(&(o + len)) {
                by_offset.remove(&(o + len));
                by_len.remove(&(nl, o + len));
                len += nl;
            }
            if o + len == top {
                top = o;
            } else {
                by_offset.insert(o, len);
                by_len.insert((len, o));
            }
            continue;
        }
        let mut chosen = None;
        for &(len, o) in by_len.range((b.size, 0)..) {
            let a = align_up(o, b.align);
            if a + b.size <= o + len {
                chosen = Some((len, o, a));
                break;
            }
        }
        let offset = match chosen {
            Some((len, o, a)) => {
                by_len.remove(&(len, o));
                by_offset.remove(&o);
                if a > o {
                    by_offset.insert(o, a - o);
                    by_len.insert((a - o, o));
                }
                let rest = o + len - (a + b.size);
                if rest > 0 {
                    by_offset.insert(a + b.size, rest);
                    by_len.insert((rest, a + b.size));
                }
                a
            }
            None => {
                let a = align_up(top, b.align);
                if a > top {
                    by_offset.insert(top, a - top);
                    by_len.insert((a - top, top));
                }
                top = a + b.size;
                a
            }
        };
        offsets[i as usize] = offset;
        peak = peak.max(offset + b.size);
    }
    Plan { offsets, peak }
}
