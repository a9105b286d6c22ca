//! The lifetime endpoints of an instance in time order, sorted once per [`super::solve`] and shared
//! by every sweep over time: validation's group totals, the lower bound, sweep-line good fit, the
//! compressed time of the occupancy trees and the verification.
//!
//! A million buffers have two million endpoints. A comparison sort of them costs a few hundred
//! milliseconds on a loaded machine and `solve` used to run five of them, so one radix sort (O(n))
//! now serves all; only time ranges that need all 64 bits fall back to a comparison sort. Each
//! endpoint carries its buffer's size and alignment (through the sort itself), and each free the
//! rank of its buffer's allocation among the allocations: the sweeps then read memory in order and
//! keep their state per buffer in allocation order, where looking buffers up by id at each endpoint
//! (a cache miss at every one, at a million buffers) made each pass cost as much as the sweep-line
//! plan itself.
//!
//! The sort is most significant digit first, on as many threads as `solve` has: each thread
//! buckets its share of the buffers by the high time bits (no thread waits on another), then each
//! takes a run of buckets, sorts each bucket by the low bits in cache, ranks its allocations and
//! measures its part of the load profile from a start it knows from the bucket counts. Ranks a
//! free cannot see (its allocation in an earlier thread's run) are filled in after, and the
//! threads' profiles are joined in order. Equal keys cannot occur (each holds its
//! buffer's id), so the result is the same on any number of threads.

mod radix;
mod run;

use std::ops::Range;

use super::Buffer;
use radix::Keys;
use run::{Run, join};

/// Most threads one sort runs on: each keeps a rank per buffer (4 bytes), and beyond a few the
/// passes are bound by memory, not by cores.
const MAX_SORTERS: usize = 8;

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

/// Tag bit of an allocation event (buffer ids stay below 2^31).
const ALLOC: u32 = 1 << 31;

/// A rank not known yet (ranks stay below 2^31).
const UNRANKED: u32 = u32::MAX;

/// One endpoint as stored (24 bytes).
#[derive(Debug, Clone, Copy, bytemuck::Zeroable)]
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
    /// Sorts the endpoints of valid buffers (`lower < upper`, fewer than 2^31 buffers).
    pub fn new(buffers: &[Buffer]) -> Events {
        Events::on(buffers, 1)
    }

    /// [`Events::new`] on `threads` threads (at least one, at most [`MAX_SORTERS`] used); the same
    /// result for any count.
    pub fn on(buffers: &[Buffer], threads: usize) -> Events {
        debug_assert!(buffers.len() < ALLOC as usize);
        let (min, max) = buffers.iter().fold((u64::MAX, 0), |(lo, hi), b| {
            (lo.min(b.lower), hi.max(b.upper))
        });
        let (mut list, runs) = match Keys::new(buffers.len(), min, max) {
            Some(keys) => keys.sort(buffers, threads.clamp(1, MAX_SORTERS)),
            None => {
                let mut list = compared(buffers);
                let mut run = Run::new(0, 0, buffers.len());
                run.finish(&mut list);
                (list, vec![run])
            }
        };
        // Frees whose allocation an earlier thread ranked.
        let mut base = 0;
        for (r, run) in runs.iter().enumerate() {
            for &k in &run.unranked {
                let e = &mut list[base + k];
                let id = (e.tag & !ALLOC) as usize;
                e.aux = runs[..r]
                    .iter()
                    .map(|earlier| earlier.ranks[id])
                    .find(|&rank| rank != UNRANKED)
                    .unwrap_or(UNRANKED);
                debug_assert_ne!(e.aux, UNRANKED, "a free before its allocation");
            }
            base += run.len;
        }
        let (load, worst) = join(&runs);
        Events { list, load, worst }
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
    pub fn range(&self, range: Range<usize>) -> impl DoubleEndedIterator<Item = Event> + '_ {
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

/// The endpoints sorted by comparison, for time ranges the radix keys cannot hold.
fn compared(buffers: &[Buffer]) -> Vec<Endpoint> {
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
    list
}

#[cfg(test)]
mod tests;
