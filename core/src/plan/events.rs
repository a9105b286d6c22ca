//! The lifetime endpoints of an instance in time order, sorted once per [`super::solve`] and shared
//! by every sweep over time: validation's group totals, the lower bound, sweep-line good fit, the
//! compressed time of the occupancy trees and the final verification.
//!
//! A million buffers have two million endpoints. A comparison sort of them costs a few hundred
//! milliseconds on a loaded machine and `solve` used to run five of them, so one LSD radix sort
//! (O(n), two or three passes for typical time ranges) now serves all; only time ranges that need
//! all 64 bits fall back to a comparison sort.

use super::Buffer;

/// Radix digit width: 2048 buckets (16 KiB of counters) stay in L1.
const DIGIT_BITS: u32 = 11;

/// Lifetime endpoints sorted by time, frees before allocations at equal times (half-open
/// lifetimes), then allocations by size descending (the order an online best fit serves them
/// best), then by buffer id.
#[derive(Debug, Clone)]
pub(crate) struct Events {
    /// `(time, tag)`: `tag & ALLOC` set for an allocation, `tag & !ALLOC` the buffer id.
    list: Vec<(u64, u32)>,
}

/// Tag bit of an allocation event (buffer ids stay below 2^31).
const ALLOC: u32 = 1 << 31;

/// One endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: u64,
    pub alloc: bool,
    pub id: u32,
}

impl Events {
    /// Sorts the endpoints of valid buffers (`lower < upper`, fewer than 2^31 buffers).
    pub fn new(buffers: &[Buffer]) -> Events {
        debug_assert!(buffers.len() < ALLOC as usize);
        let mut list: Vec<(u64, u32)> = Vec::with_capacity(buffers.len() * 2);
        for (i, b) in buffers.iter().enumerate() {
            list.push((b.upper, i as u32));
            list.push((b.lower, i as u32 | ALLOC));
        }
        sort(&mut list);
        // Allocations at one time: largest first (the sort left them in id order).
        let mut k = 0;
        while k < list.len() {
            let mut j = k + 1;
            while j < list.len() && list[j].0 == list[k].0 && list[j].1 & ALLOC == list[k].1 & ALLOC
            {
                j += 1;
            }
            if list[k].1 & ALLOC != 0 && j - k > 1 {
                list[k..j].sort_by_key(|&(_, tag)| {
                    std::cmp::Reverse(buffers[(tag & !ALLOC) as usize].size)
                });
            }
            k = j;
        }
        Events { list }
    }

    /// The endpoints in order.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.list.iter().map(|&(time, tag)| Event {
            time,
            alloc: tag & ALLOC != 0,
            id: tag & !ALLOC,
        })
    }

    /// The max-load lower bound and a time at which it is reached (0 for no buffers).
    pub fn peak_load(&self, buffers: &[Buffer]) -> (u64, u64) {
        let mut live: u64 = 0;
        let mut best = (0, 0);
        for e in self.iter() {
            let size = buffers[e.id as usize].size;
            if e.alloc {
                live = live.saturating_add(size);
                if live > best.0 {
                    best = (live, e.time);
                }
            } else {
                live = live.saturating_sub(size);
            }
        }
        best
    }

    /// The largest padded total `sum(size + align - 1)` of one time-connected group of buffers
    /// (a maximal run of the sweep during which something is live), exact, and its buffer count.
    pub fn worst_group(&self, buffers: &[Buffer]) -> (u128, usize) {
        let (mut live, mut total, mut count) = (0usize, 0u128, 0usize);
        let mut worst = (0u128, 0usize);
        for e in self.iter() {
            let b = &buffers[e.id as usize];
            if e.alloc {
                if live == 0 {
                    (total, count) = (0, 0);
                }
                live += 1;
                total += b.size as u128 + (b.align - 1) as u128;
                count += 1;
                worst = worst.max((total, count));
            } else {
                live -= 1;
            }
        }
        worst
    }

    /// Compressed time: each buffer's lifetime as `[first, last)` over the elementary segments
    /// between distinct endpoint times, and the number of segments.
    pub fn spans(&self, n: usize) -> (Vec<(u32, u32)>, usize) {
        let mut span = vec![(0u32, 0u32); n];
        let mut rank = 0u32;
        let mut prev = None;
        for e in self.iter() {
            if prev.is_some_and(|p| p != e.time) {
                rank += 1;
            }
            prev = Some(e.time);
            let s = &mut span[e.id as usize];
            if e.alloc {
                s.0 = rank;
            } else {
                s.1 = rank;
            }
        }
        (span, rank as usize)
    }
}

/// Sorts by `(time, alloc flag, id)`, stable on the initial id order: an LSD radix sort on
/// `(time - min) << 1 | alloc` when that fits in 64 bits, a comparison sort otherwise.
fn sort(list: &mut Vec<(u64, u32)>) {
    let Some(min) = list.iter().map(|e| e.0).min() else {
        return;
    };
    let max = list.iter().map(|e| e.0).max().unwrap_or(min);
    if max - min >= 1 << 63 {
        list.sort_unstable_by_key(|&(t, tag)| (t, tag & ALLOC, tag & !ALLOC));
        return;
    }
    let key = |&(t, tag): &(u64, u32)| ((t - min) << 1) | u64::from(tag >> 31);
    let bits = 64 - (((max - min) << 1) | 1).leading_zeros();
    let mut from = std::mem::take(list);
    let mut to = vec![(0u64, 0u32); from.len()];
    let mut shift = 0;
    while shift < bits {
        let mut count = vec![0usize; 1 << DIGIT_BITS];
        let digit = |e: &(u64, u32)| ((key(e) >> shift) & ((1 << DIGIT_BITS) - 1)) as usize;
        for e in &from {
            count[digit(e)] += 1;
        }
        let mut sum = 0;
        for c in count.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        for e in &from {
            let d = digit(e);
            to[count[d]] = *e;
            count[d] += 1;
        }
        std::mem::swap(&mut from, &mut to);
        shift += DIGIT_BITS;
    }
    *list = from;
}

#[cfg(test)]
mod tests;
