//! The lifetime endpoints of an instance in time order, sorted once per [`super::solve`] and shared
//! by every sweep over time: validation's group totals, the lower bound, sweep-line good fit, the
//! compressed time of the occupancy trees and the verification.
//!
//! A million buffers have two million endpoints. A comparison sort of them costs a few hundred
//! milliseconds on a loaded machine and `solve` used to run five of them, so one LSD radix sort
//! (O(n), two or three passes for typical time ranges) now serves all; only time ranges that need
//! all 64 bits fall back to a comparison sort. Each endpoint carries its buffer's size and
//! alignment (through the sort itself), and each free the rank of its buffer's allocation among
//! the allocations: the sweeps then read memory in order and keep their state per buffer in
//! allocation order, where looking buffers up by id at each endpoint (a cache miss at every one,
//! at a million buffers) made each pass cost as much as the sweep-line plan itself.

use super::Buffer;

/// Radix digit width: 2048 buckets (16 KiB of counters) stay in L1.
const DIGIT_BITS: u32 = 11;

/// Lifetime endpoints sorted by time, frees before allocations at equal times (half-open
/// lifetimes), then allocations by size descending (the order an online best fit serves them
/// best), then by buffer id.
#[derive(Debug, Clone)]
pub(crate) struct Events {
    list: Vec<Endpoint>,
    /// See [`Events::peak_load`] and [`Events::worst_group`].
    load: (u64, u64),
    worst: (u128, usize),
}

/// The live load and the time-connected groups, measured along the sorted endpoints.
#[derive(Debug, Default)]
struct Profile {
    live_bytes: u64,
    live: usize,
    /// The current group's padded total and buffer count.
    group: (u128, usize),
    load: (u64, u64),
    worst: (u128, usize),
}

impl Profile {
    fn open(&mut self, time: u64, size: u64, align: u64) {
        if self.live == 0 {
            self.group = (0, 0);
        }
        self.live += 1;
        self.group.0 += size as u128 + (align - 1) as u128;
        self.group.1 += 1;
        self.worst = self.worst.max(self.group);
        self.live_bytes = self.live_bytes.saturating_add(size);
        if self.live_bytes > self.load.0 {
            self.load = (self.live_bytes, time);
        }
    }

    fn close(&mut self, size: u64) {
        self.live -= 1;
        self.live_bytes = self.live_bytes.saturating_sub(size);
    }
}

/// Tag bit of an allocation event (buffer ids stay below 2^31).
const ALLOC: u32 = 1 << 31;

/// One endpoint as stored (24 bytes).
#[derive(Debug, Clone, Copy)]
struct Endpoint {
    time: u64,
    size: u64,
    /// `tag & ALLOC` set for an allocation, `tag & !ALLOC` the buffer id.
    tag: u32,
    /// An allocation's log2 alignment; a free's [`Event::opened`].
    aux: u32,
}

impl Endpoint {
    fn event(&self) -> Event {
        let alloc = self.tag & ALLOC != 0;
        Event {
            time: self.time,
            alloc,
            id: self.tag & !ALLOC,
            size: self.size,
            align: if alloc { 1 << self.aux } else { 1 },
            opened: if alloc { 0 } else { self.aux },
        }
    }
}

/// One endpoint, with its buffer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: u64,
    pub alloc: bool,
    pub id: u32,
    pub size: u64,
    /// The buffer's alignment at an allocation (1 at a free).
    pub align: u64,
    /// At a free, the rank of the buffer's allocation among all allocations in time order (0 at
    /// an allocation): a sweep keeps what it knows of live buffers in that order, near in memory
    /// to the endpoints around, instead of in input order.
    pub opened: u32,
}

impl Events {
    /// Sorts the endpoints of valid buffers (`lower < upper`, fewer than 2^31 buffers). Four
    /// passes over them: building (with the time range), two or three radix passes, and one that
    /// orders equal-time allocations, ranks them and measures the load.
    pub fn new(buffers: &[Buffer]) -> Events {
        debug_assert!(buffers.len() < ALLOC as usize);
        let (min, max) = buffers.iter().fold((u64::MAX, 0), |(lo, hi), b| {
            (lo.min(b.lower), hi.max(b.upper))
        });
        let mut list = sorted(buffers, min, max);
        let mut profile = Profile::default();
        // Each free learns its allocation's rank: the one access by buffer id.
        let mut rank = vec![0u32; buffers.len()];
        let mut allocs = 0u32;
        let mut k = 0;
        while k < list.len() {
            let (time, kind) = (list[k].time, list[k].tag & ALLOC);
            let mut j = k + 1;
            while j < list.len() && list[j].time == time && list[j].tag & ALLOC == kind {
                j += 1;
            }
            let group = &mut list[k..j];
            if kind != 0 {
                // Allocations at one time: largest first (the sort left them in id order).
                group.sort_by_key(|e| std::cmp::Reverse(e.size));
                for e in group {
                    rank[(e.tag & !ALLOC) as usize] = allocs;
                    allocs += 1;
                    profile.open(time, e.size, 1 << e.aux);
                }
            } else {
                for e in group {
                    e.aux = rank[(e.tag & !ALLOC) as usize];
                    profile.close(e.size);
                }
            }
            k = j;
        }
        Events {
            list,
            load: profile.load,
            worst: profile.worst,
        }
    }

    /// The endpoints in order.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.list.iter().map(Endpoint::event)
    }

    /// Number of endpoints (twice the buffers).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The endpoints at positions `range`, either way round.
    pub fn range(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl DoubleEndedIterator<Item = Event> + '_ {
        self.list[range].iter().map(Endpoint::event)
    }

    /// The max-load lower bound and a time at which it is reached (0 for no buffers).
    pub fn peak_load(&self) -> (u64, u64) {
        self.load
    }

    /// The largest padded total `sum(size + align - 1)` of one time-connected group of buffers
    /// (a maximal run of the sweep during which something is live), exact, and its buffer count.
    pub fn worst_group(&self) -> (u128, usize) {
        self.worst
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

/// Bits of a radix key below the id: an allocation's log2 alignment (at most 62).
const ALIGN_BITS: u32 = 6;

/// The endpoints sorted by `(time, alloc flag, id)`, every time within `[min, max]`. When
/// `(time - min) << 1 | alloc`, the id and the log2 alignment fit in one `u64` together (they do
/// unless times span more than about 2^32 steps at a million buffers), an LSD radix sort of
/// `(key, size)` records on the time bits alone (ids are already in order); otherwise a comparison
/// sort. The records carry everything an endpoint needs, so no pass reads the buffers in time
/// order: fetching each endpoint's buffer after sorting 8-byte keys was a cache and TLB miss per
/// endpoint, 0.14 CPU s of the 0.3 s validation took at a million buffers.
fn sorted(buffers: &[Buffer], min: u64, max: u64) -> Vec<Endpoint> {
    if buffers.is_empty() {
        return Vec::new();
    }
    let id_bits = usize::BITS - buffers.len().leading_zeros();
    let low = id_bits + ALIGN_BITS;
    let time_bits =
        (max.saturating_sub(min) < 1 << 62).then(|| 64 - (((max - min) << 1) | 1).leading_zeros());
    let Some(time_bits) = time_bits.filter(|t| t + low <= 64) else {
        let endpoint = |id: usize, alloc: bool| {
            let b = &buffers[id];
            Endpoint {
                time: if alloc { b.lower } else { b.upper },
                size: b.size,
                tag: id as u32 | if alloc { ALLOC } else { 0 },
                aux: if alloc { b.align.trailing_zeros() } else { 0 },
            }
        };
        let mut list: Vec<Endpoint> = (0..buffers.len())
            .flat_map(|i| [endpoint(i, false), endpoint(i, true)])
            .collect();
        list.sort_unstable_by_key(|e| (e.time, e.tag & ALLOC, e.tag & !ALLOC));
        return list;
    };
    let digits = time_bits.div_ceil(DIGIT_BITS) as usize;
    let digit = |key: u64, d: usize| {
        ((key >> (low + d as u32 * DIGIT_BITS)) & ((1 << DIGIT_BITS) - 1)) as usize
    };
    let mut counts = vec![[0usize; 1 << DIGIT_BITS]; digits];
    let mut records: Vec<(u64, u64)> = Vec::with_capacity(buffers.len() * 2);
    for (i, b) in buffers.iter().enumerate() {
        let id = (i as u64) << ALIGN_BITS;
        let free = (((b.upper - min) << 1) << low) | id;
        let alloc =
            ((((b.lower - min) << 1) | 1) << low) | id | u64::from(b.align.trailing_zeros());
        for key in [free, alloc] {
            for (d, count) in counts.iter_mut().enumerate() {
                count[digit(key, d)] += 1;
            }
            records.push((key, b.size));
        }
    }
    let mut to = vec![(0u64, 0u64); records.len()];
    for (d, count) in counts.iter_mut().enumerate() {
        let mut sum = 0;
        for c in count.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        for &record in &records {
            let k = digit(record.0, d);
            to[count[k]] = record;
            count[k] += 1;
        }
        std::mem::swap(&mut records, &mut to);
    }
    drop(to);
    let id_mask = (1u64 << id_bits) - 1;
    records
        .iter()
        .map(|&(key, size)| {
            let alloc = (key >> low) & 1 == 1;
            Endpoint {
                time: min + (key >> (low + 1)),
                size,
                tag: ((key >> ALIGN_BITS) & id_mask) as u32 | if alloc { ALLOC } else { 0 },
                aux: if alloc {
                    (key & ((1 << ALIGN_BITS) - 1)) as u32
                } else {
                    0
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
