//! The max-load lower bound and MiniMalloc's sections (maximal live sets), from one sort of the
//! lifetime endpoints.
//!
//! At any time t the buffers live at t are pairwise disjoint in space, so every plan's peak is at
//! least their summed size. The maximum over t (LOAD) is the bound every planner reports against.

use super::Buffer;

/// The max-load lower bound: the largest total size of buffers live at one time.
///
/// No valid plan has a smaller peak; a plan whose peak equals it is optimal. Buffers with
/// `lower >= upper` are never live and are ignored. Runs in O(n log n).
pub fn lower_bound(buffers: &[Buffer]) -> u64 {
    peak_load(buffers).0
}

/// The max-load lower bound and a time at which it is reached (0 for no buffers).
pub(crate) fn peak_load(buffers: &[Buffer]) -> (u64, u64) {
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(buffers.len() * 2);
    for b in buffers.iter().filter(|b| b.lower < b.upper) {
        // `false` sorts first: frees before allocations at equal times (half-open lifetimes).
        events.push((b.lower, true, b.size));
        events.push((b.upper, false, b.size));
    }
    events.sort_unstable();
    let mut live: u64 = 0;
    let mut best = (0, 0);
    for (t, alloc, size) in events {
        if alloc {
            live = live.saturating_add(size);
            if live > best.0 {
                best = (live, t);
            }
        } else {
            live = live.saturating_sub(size);
        }
    }
    best
}

/// MiniMalloc's sections: the maximal sets of simultaneously live buffers, in time order.
///
/// Section `k` is the live set at time `rep[k]` (the last allocation before some free). Each buffer
/// belongs to the contiguous section range `first[i]..=last[i]`, and every buffer to at least one.
/// Every section is a clique, so `total[k] <= capacity` is necessary, and `max(total)` is LOAD.
#[derive(Debug, Clone)]
pub(crate) struct Sections {
    /// Representative time of each section, strictly increasing.
    pub rep: Vec<u64>,
    /// Summed size of each section's buffers.
    pub total: Vec<u64>,
    /// First section of each buffer.
    pub first: Vec<u32>,
    /// Last section of each buffer (inclusive).
    pub last: Vec<u32>,
}

impl Sections {
    /// Computes the sections of valid buffers (`lower < upper`) in O(n log n + total membership).
    pub fn new(buffers: &[Buffer]) -> Sections {
        let mut events: Vec<(u64, bool)> = Vec::with_capacity(buffers.len() * 2);
        for b in buffers {
            events.push((b.lower, true));
            events.push((b.upper, false));
        }
        events.sort_unstable();
        let mut rep = Vec::new();
        let mut last_start = None;
        for (t, alloc) in events {
            if alloc {
                last_start = Some(t);
            } else if let Some(s) = last_start.take() {
                rep.push(s);
            }
        }
        let mut first = Vec::with_capacity(buffers.len());
        let mut last = Vec::with_capacity(buffers.len());
        let mut diff = vec![0i128; rep.len() + 1];
        for b in buffers {
            let f = rep.partition_point(|&r| r < b.lower);
            let l = rep.partition_point(|&r| r < b.upper);
            debug_assert!(f < l, "every buffer belongs to a section");
            first.push(f as u32);
            last.push((l - 1) as u32);
            diff[f] += b.size as i128;
            diff[l] -= b.size as i128;
        }
        let mut total = Vec::with_capacity(rep.len());
        let mut run: i128 = 0;
        for d in diff.iter().take(rep.len()) {
            run += d;
            total.push(run as u64);
        }
        Sections {
            rep,
            total,
            first,
            last,
        }
    }

    /// Number of sections.
    pub fn len(&self) -> usize {
        self.rep.len()
    }
}

/// Load profile support: for each buffer, the largest live load at any time of its lifetime
/// (MiniMalloc's "T" key: the heaviest section the buffer touches).
pub(crate) fn max_load_over_life(buffers: &[Buffer]) -> Vec<u64> {
    let s = Sections::new(buffers);
    // Sparse table for range maximum over section totals.
    let n = s.len();
    if n == 0 {
        return vec![0; buffers.len()];
    }
    let mut table = vec![s.total.clone()];
    let mut width = 1;
    while width * 2 <= n {
        let prev = &table[table.len() - 1];
        let next: Vec<u64> = (0..=n - width * 2)
            .map(|i| prev[i].max(prev[i + width]))
            .collect();
        table.push(next);
        width *= 2;
    }
    (0..buffers.len())
        .map(|i| {
            let (f, l) = (s.first[i] as usize, s.last[i] as usize + 1);
            let k = (usize::BITS - 1 - (l - f).leading_zeros()) as usize;
            table[k][f].max(table[k][l - (1 << k)])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_counts_frees_before_allocations() {
        let b = Buffer::list(&[(0, 2, 5), (2, 4, 7), (1, 3, 1)]);
        assert_eq!(lower_bound(&b), 8);
        assert_eq!(lower_bound(&[]), 0);
    }

    #[test]
    fn sections_are_maximal_cliques() {
        let b = Buffer::list(&[(0, 2, 5), (2, 4, 7), (1, 3, 1)]);
        let s = Sections::new(&b);
        assert_eq!(s.rep, vec![1, 2]);
        assert_eq!(s.total, vec![6, 8]);
        assert_eq!(
            (s.first.clone(), s.last.clone()),
            (vec![0, 1, 0], vec![0, 1, 1])
        );
        assert_eq!(max_load_over_life(&b), vec![6, 8, 8]);
    }
}
