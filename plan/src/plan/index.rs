//! Conflict queries: which buffers' lifetimes intersect a given one.
//!
//! - [`IntervalIndex`]: buffers sorted by `lower` with a segment tree of the maximum `upper`,
//!   answering "all buffers live somewhere in `[l, u)`" in O((k + 1) log n) with O(n) memory.
//!   Instances can have hundreds of millions of conflicting pairs (IOPDDL Y_1 has 1.8e8), so the
//!   heuristics never enumerate them: they use [`super::occupancy`] instead.
//! - [`conflict_csr`]: the flat list of every buffer's conflicts, for the exact search (small
//!   instances, many passes over the same lists).

use super::Buffer;

/// Static interval index over a set of lifetimes.
#[derive(Debug, Clone)]
pub(crate) struct IntervalIndex {
    /// Buffer ids sorted by `lower`.
    order: Vec<u32>,
    /// `lower` of `order[k]`.
    lower: Vec<u64>,
    /// `upper` of `order[k]`.
    upper: Vec<u64>,
    /// Segment tree over positions: node `k` holds the maximum `upper` of its range; leaves start
    /// at `leaves` (a power of two); unused leaves hold 0, which no query matches.
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

/// Every buffer's conflicts as a flat CSR list: `list[start[i]..start[i + 1]]` are the buffers
/// conflicting with `i`, ascending. Memory: 4 bytes per conflicting ordered pair.
pub(crate) fn conflict_csr(buffers: &[Buffer]) -> (Vec<usize>, Vec<u32>) {
    let index = IntervalIndex::new(buffers);
    let mut start = Vec::with_capacity(buffers.len() + 1);
    let mut list = Vec::new();
    start.push(0);
    for (i, b) in buffers.iter().enumerate() {
        let from = list.len();
        index.for_each_overlap(b.lower, b.upper, |j| {
            if j as usize != i {
                list.push(j);
            }
        });
        list[from..].sort_unstable();
        start.push(list.len());
    }
    (start, list)
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
        let (start, list) = conflict_csr(&buffers);
        assert_eq!(list.len() as u64, 2 * pairs);
        for i in 0..300 {
            let want: Vec<u32> = (0..300)
                .filter(|&j| j != i && buffers[i].conflicts(&buffers[j]))
                .map(|j| j as u32)
                .collect();
            assert_eq!(&list[start[i]..start[i + 1]], &want[..]);
        }
    }
}
