//! Conflict queries: which buffers' lifetimes intersect a given one.
//!
//! Two representations behind one [`Conflicts::for_each`]:
//! - a flat CSR list of every buffer's conflicts (fastest for repeated passes; 4 bytes per
//!   conflicting ordered pair, so only used below [`CSR_MAX_ENTRIES`]);
//! - an [`IntervalIndex`]: buffers sorted by `lower` with a segment tree of the maximum `upper`,
//!   answering "all buffers live somewhere in `[l, u)`" in O((k + 1) log n) with O(n) memory. Used for
//!   instances with hundreds of millions of conflicting pairs (IOPDDL Y_1 has 1.8e8).

use super::Buffer;

/// Largest CSR conflict list built (entries of 4 bytes: 128 MiB).
pub(crate) const CSR_MAX_ENTRIES: u64 = 32 << 20;

/// Static interval index over a set of lifetimes.
#[derive(Debug, Clone)]
pub(crate) struct IntervalIndex {
    /// Buffer ids sorted by `lower`.
    order: Vec<u32>,
    /// `lower` of `order[k]`.
    lower: Vec<u64>,
    /// `upper` of `order[k]`.
    upper: Vec<u64>,
    /// Segment tree over positions: node `k` holds the maximum `upper` of its range; leaves start at
    /// `leaves` (a power of two); unused leaves hold 0.
    max_upper: Vec<u64>,
    leaves: usize,
}

impl IntervalIndex {
    /// Builds the index in O(n log n).
    pub fn new(buffers: &[Buffer]) -> Self {
        let mut order: Vec<u32> = (0..buffers.len() as u32).collect();
        order.sort_unstable_by_key(|&i| buffers[i as usize].lower);
        let lower: Vec<u64> = order.iter().map(|&i| buffers[i as usize].lower).collect();
        let upper: Vec<u64> = order.iter().map(|&i| buffers[i as usize].upper).collect();
        let leaves = buffers.len().next_power_of_two().max(1);
        let mut max_upper = vec![0u64; 2 * leaves];
        max_upper[leaves..leaves + upper.len()].copy_from_slice(&upper);
        for k in (1..leaves).rev() {
            max_upper[k] = max_upper[2 * k].max(max_upper[2 * k + 1]);
        }
        IntervalIndex {
            order,
            lower,
            upper,
            max_upper,
            leaves,
        }
    }

    /// Calls `f` with every buffer id whose lifetime intersects `[l, u)`.
    pub fn for_each_overlap(&self, l: u64, u: u64, mut f: impl FnMut(u32)) {
        let end = self.lower.partition_point(|&x| x < u);
        if end == 0 {
            return;
        }
        let mut stack: [(usize, usize, usize); 64] = [(0, 0, 0); 64];
        let mut top = 1;
        stack[0] = (1, 0, self.leaves);
        while top > 0 {
            top -= 1;
            let (node, lo, hi) = stack[top];
            if lo >= end || self.max_upper[node] <= l {
                continue;
            }
            if hi - lo == 1 {
                debug_assert!(self.upper[lo] > l && self.lower[lo] < u);
                f(self.order[lo]);
                continue;
            }
            let mid = (lo + hi) / 2;
            stack[top] = (2 * node + 1, mid, hi);
            stack[top + 1] = (2 * node, lo, mid);
            top += 2;
        }
    }
}

/// Number of unordered conflicting pairs, by one sweep (O(n log n)).
pub(crate) fn conflict_pairs(buffers: &[Buffer]) -> u64 {
    let mut events: Vec<(u64, bool)> = Vec::with_capacity(buffers.len() * 2);
    for b in buffers {
        events.push((b.lower, true));
        events.push((b.upper, false));
    }
    events.sort_unstable();
    let (mut live, mut pairs) = (0u64, 0u64);
    for (_, alloc) in events {
        if alloc {
            pairs += live;
            live += 1;
        } else {
            live -= 1;
        }
    }
    pairs
}

/// Every buffer's conflicts, by whichever representation fits in memory.
#[derive(Debug, Clone)]
pub(crate) enum Conflicts {
    /// `list[start[i]..start[i + 1]]` are the conflicts of buffer `i`, ascending.
    Csr { start: Vec<usize>, list: Vec<u32> },
    /// Query the interval index with each buffer's lifetime.
    Index {
        index: IntervalIndex,
        life: Vec<(u64, u64)>,
    },
}

impl Conflicts {
    /// Builds the CSR list when it has at most `max_entries` entries, else the index.
    pub fn new(buffers: &[Buffer], max_entries: u64) -> Self {
        let index = IntervalIndex::new(buffers);
        let life: Vec<(u64, u64)> = buffers.iter().map(|b| (b.lower, b.upper)).collect();
        if conflict_pairs(buffers).saturating_mul(2) > max_entries {
            return Conflicts::Index { index, life };
        }
        let mut start = Vec::with_capacity(buffers.len() + 1);
        let mut list = Vec::new();
        start.push(0);
        for (i, &(l, u)) in life.iter().enumerate() {
            let from = list.len();
            index.for_each_overlap(l, u, |j| {
                if j as usize != i {
                    list.push(j);
                }
            });
            list[from..].sort_unstable();
            start.push(list.len());
        }
        Conflicts::Csr { start, list }
    }

    /// Calls `f` with every buffer that conflicts with buffer `i` (never `i` itself).
    #[inline]
    pub fn for_each(&self, i: usize, mut f: impl FnMut(usize)) {
        match self {
            Conflicts::Csr { start, list } => {
                for &j in &list[start[i]..start[i + 1]] {
                    f(j as usize);
                }
            }
            Conflicts::Index { index, life } => {
                let (l, u) = life[i];
                index.for_each_overlap(l, u, |j| {
                    if j as usize != i {
                        f(j as usize);
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_csr_match_brute_force() {
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s >> 33
        };
        let buffers: Vec<Buffer> = (0..300)
            .map(|_| {
                let l = next() % 100;
                Buffer::new(l, l + 1 + next() % 20, 1)
            })
            .collect();
        let pairs = (0..300)
            .flat_map(|i| (i + 1..300).map(move |j| (i, j)))
            .filter(|&(i, j)| buffers[i].conflicts(&buffers[j]))
            .count() as u64;
        assert_eq!(conflict_pairs(&buffers), pairs);
        for max in [0, u64::MAX] {
            let c = Conflicts::new(&buffers, max);
            for i in 0..300 {
                let mut got = Vec::new();
                c.for_each(i, |j| got.push(j));
                got.sort_unstable();
                let want: Vec<usize> = (0..300)
                    .filter(|&j| j != i && buffers[i].conflicts(&buffers[j]))
                    .collect();
                assert_eq!(got, want);
            }
        }
    }
}
