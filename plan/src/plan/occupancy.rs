//! The placement engine's data structure: which offset ranges placed buffers occupy, per time range,
//! without ever enumerating conflicting pairs.
//!
//! Time is compressed to the elementary segments between distinct lifetime endpoints, and a segment
//! tree is built over them. A placed buffer `[lower, upper) × [offset, offset + size)` is added to
//! - `cover` of its canonical nodes (the O(log m) maximal nodes inside its lifetime), and
//! - `union` of those nodes and of every node on the two root-to-leaf paths of its first and last
//!   segment (every node that partially overlaps the lifetime).
//!
//! Both hold *merged* sorted offset ranges (touching ranges merge), so `union(v)` is the set of
//! bytes used by some placed buffer live somewhere in `v`'s time range, and `cover(v)` those used by
//! a placed buffer live over all of it. The bytes used by the placed buffers that conflict with a
//! query lifetime are exactly `⋃ union(v)` over the query's canonical nodes `⋃ cover(a)` over the
//! nodes `a` on its two boundary paths: a conflict shares a segment with the query; its canonical
//! node there is either inside one of the query's canonical nodes (and then that node is on its
//! boundary paths, so it is in that `union`), or a strict ancestor of one (and then it partially
//! overlaps the query, so it is on the query's boundary paths).
//!
//! A query scans the union of those at most 4·log₂ m sorted sets upward from 0, keeping per set a
//! cursor on its first range above the scan point and that range's start in a flat array. Only gaps
//! that can hold the buffer stop the scan: a set blocks the candidate `[align_up(x), + size)` when
//! its next range starts inside it, and the scan point then jumps to that range's end; sets whose
//! next range starts above the candidate are not touched, and a set left behind catches up by
//! galloping. Cost O(log² m) per insertion (plus merging) and O((j + g + 1) · s) per query, with j
//! the ranges jumped, g the gaps that fit and s ≤ 4·log₂ m the sets touched (a compare each in the
//! flat array); independent of the number of conflicting pairs (1.8e8 on IOPDDL Y_1).

use super::align_up;
use super::events::Events;

/// Merged, sorted, pairwise non-touching offset ranges `[start, end)`.
type Ranges = Vec<(u64, u64)>;

/// How a buffer picks its gap among the placed conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fit {
    /// Smallest gap between placed conflicts (or below the lowest) that fits, the lowest such gap
    /// on ties; otherwise on top of the highest conflict (TFLite's rule).
    Best,
    /// Lowest offset that fits.
    Lowest,
}

/// Occupied offset ranges over compressed time; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Occupancy {
    /// Leaf index range `[first, last)` of each buffer's lifetime.
    span: Vec<(u32, u32)>,
    /// Number of leaves (a power of two); node `k` has children `2k`, `2k + 1`; leaves at `leaves..`.
    leaves: usize,
    cover: Vec<Ranges>,
    union: Vec<Ranges>,
    /// Scratch: indices into `cover`/`union` of the sets of the current query (`(node, is_union)`).
    sets: Vec<(u32, bool)>,
    /// Scratch: the scan cursor into each of `sets`.
    cursor: Vec<usize>,
    /// Scratch: the start of the range at each cursor (`u64::MAX` once a set is exhausted).
    next: Vec<u64>,
}

/// Trees with more nodes than this are freed on a background thread (native builds): a million
/// buffers leave millions of range lists, whose free would land after the deadline that greedy
/// had just respected. Mid-sized trees count too: the portfolio drops several after its
/// deadline, each far dearer to free than a thread is to start
/// (`docs/decisions/planner-tuning.md`).
#[cfg(not(target_arch = "wasm32"))]
const BACKGROUND_FREE_NODES: usize = 1 << 12;

#[cfg(not(target_arch = "wasm32"))]
impl Drop for Occupancy {
    fn drop(&mut self) {
        if self.cover.len() > BACKGROUND_FREE_NODES {
            let lists = (
                std::mem::take(&mut self.cover),
                std::mem::take(&mut self.union),
            );
            // If no thread can be started, the lists are freed here instead.
            let _ = std::thread::Builder::new()
                .name("tensormem-plan-free".into())
                .spawn(move || drop(lists));
        }
    }
}

impl Occupancy {
    /// An empty structure for `n` buffers with the sorted endpoints `events`, built in O(n).
    pub fn new(events: &Events, n: usize) -> Self {
        let (span, segments) = events.spans(n);
        let leaves = segments.next_power_of_two().max(1);
        Occupancy {
            span,
            leaves,
            cover: vec![Vec::new(); 2 * leaves],
            union: vec![Vec::new(); 2 * leaves],
            sets: Vec::new(),
            cursor: Vec::new(),
            next: Vec::new(),
        }
    }

    /// Removes every placed buffer, in O(nodes).
    pub fn clear(&mut self) {
        for r in self.cover.iter_mut().chain(self.union.iter_mut()) {
            r.clear();
        }
    }

    /// Records buffer `id` as occupying `[offset, end)` during its lifetime.
    pub fn insert(&mut self, id: usize, offset: u64, end: u64) {
        let (first, last) = self.span[id];
        debug_assert!(first < last);
        let (mut l, mut r) = (first as usize + self.leaves, last as usize + self.leaves);
        while l < r {
            if l & 1 == 1 {
                add(&mut self.cover[l], offset, end);
                add(&mut self.union[l], offset, end);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                add(&mut self.cover[r], offset, end);
                add(&mut self.union[r], offset, end);
            }
            l /= 2;
            r /= 2;
        }
        // Boundary paths: every node containing the first or the last leaf.
        let mut a = first as usize + self.leaves;
        let mut b = last as usize - 1 + self.leaves;
        while a >= 1 {
            add(&mut self.union[a], offset, end);
            if b != a {
                add(&mut self.union[b], offset, end);
            }
            a /= 2;
            b /= 2;
        }
    }

    /// The offset at which buffer `id` (`size`, `align`) goes among the placed buffers it conflicts
    /// with, by rule `fit`: a free gap `[x, g)` between (or below) their ranges qualifies when
    /// `align_up(x) + size <= g`; otherwise it goes at `align_up` of their highest end.
    pub fn choose(&mut self, id: usize, size: u64, align: u64, fit: Fit) -> u64 {
        let (first, last) = self.span[id];
        self.sets.clear();
        let (mut l, mut r) = (first as usize + self.leaves, last as usize + self.leaves);
        while l < r {
            if l & 1 == 1 {
                if !self.union[l].is_empty() {
                    self.sets.push((l as u32, true));
                }
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                if !self.union[r].is_empty() {
                    self.sets.push((r as u32, true));
                }
            }
            l /= 2;
            r /= 2;
        }
        let mut a = first as usize + self.leaves;
        let mut b = last as usize - 1 + self.leaves;
        while a >= 1 {
            if !self.cover[a].is_empty() {
                self.sets.push((a as u32, false));
            }
            if b != a && !self.cover[b].is_empty() {
                self.sets.push((b as u32, false));
            }
            a /= 2;
            b /= 2;
        }
        let (union, cover) = (&self.union, &self.cover);
        let sets: Vec<&[(u64, u64)]> = self
            .sets
            .iter()
            .map(|&(node, is_union)| {
                if is_union {
                    &union[node as usize][..]
                } else {
                    &cover[node as usize][..]
                }
            })
            .collect();
        let k = sets.len();
        self.cursor.clear();
        self.cursor.resize(k, 0);
        self.next.clear();
        self.next.extend(sets.iter().map(|s| s[0].0));
        let (cursor, next) = (&mut self.cursor, &mut self.next);
        // `x` only rises; it is 0 or the end of a range, so once no set blocks it, it starts a
        // maximal free gap of the union. A fitting gap is never jumped over: a range that starts
        // below its aligned start plus `size` lies below it.
        let mut x = 0u64;
        let mut best: Option<(u64, u64)> = None; // (gap length, offset)
        loop {
            let mut cand = align_up(x, align);
            let mut lim = cand.saturating_add(size);
            // Passes over the sets until one moves nothing: then `[cand, lim)` is free in all.
            loop {
                let mut clean = true;
                for j in 0..k {
                    if next[j] < lim {
                        clean = false;
                        let s = sets[j];
                        let mut c = seek(s, cursor[j], x);
                        if let Some(r) = s.get(c)
                            && r.0 < lim
                        {
                            x = r.1;
                            cand = align_up(x, align);
                            lim = cand.saturating_add(size);
                            c += 1;
                        }
                        cursor[j] = c;
                        next[j] = s.get(c).map_or(u64::MAX, |r| r.0);
                    }
                }
                if clean {
                    break;
                }
            }
            // The gap ends at the lowest range start above it.
            let g = next.iter().copied().min().unwrap_or(u64::MAX);
            if g == u64::MAX {
                return best.map_or(cand, |(_, o)| o);
            }
            let len = g - cand;
            match fit {
                Fit::Lowest => return cand,
                Fit::Best => {
                    if len == size {
                        // A perfect fit: no gap is smaller (an earlier one would have returned).
                        return cand;
                    }
                    if best.is_none_or(|(bl, _)| len < bl) {
                        best = Some((len, cand));
                    }
                }
            }
            x = g;
        }
    }
}

/// The first index at or after `c` whose range ends above `x`, by galloping (ranges are sorted and
/// disjoint, so their ends ascend).
#[inline]
fn seek(s: &[(u64, u64)], c: usize, x: u64) -> usize {
    if s.get(c).is_none_or(|r| r.1 > x) {
        return c;
    }
    let (mut lo, mut step) = (c + 1, 1usize);
    let hi = loop {
        let probe = lo + step - 1;
        if probe >= s.len() {
            break s.len();
        }
        if s[probe].1 > x {
            break probe;
        }
        lo = probe + 1;
        step *= 2;
    };
    lo + s[lo..hi].partition_point(|r| r.1 <= x)
}

/// Adds `[start, end)` to merged ranges, merging with every range it overlaps or touches.
fn add(ranges: &mut Ranges, start: u64, end: u64) {
    let lo = ranges.partition_point(|r| r.1 < start);
    let hi = ranges.partition_point(|r| r.0 <= end);
    if lo == hi {
        ranges.insert(lo, (start, end));
    } else {
        let merged = (ranges[lo].0.min(start), ranges[hi - 1].1.max(end));
        ranges[lo] = merged;
        ranges.drain(lo + 1..hi);
    }
}

#[cfg(test)]
mod tests;
