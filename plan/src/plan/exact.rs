//! Exact search for the decision form: place every buffer within a capacity, or prove it impossible.
//!
//! A branch and bound in the spirit of MiniMalloc (Moffitt, ASPLOS 2023), restated:
//! - **Canonical placements.** Any valid plan can be made *resting* (every buffer on 0 or on a
//!   conflict's top) without raising the peak. The search builds resting plans in non-decreasing
//!   offset order, ties broken by a static rank, so each has exactly one path in the tree. A buffer
//!   is only ever tried at `min_offset`, the aligned top of its highest placed conflict.
//! - **Dominance.** A candidate at offset `o` is useless when some unplaced buffer would fit entirely
//!   below `o` (`min_offset + size <= o`): nothing later can go below `o`, so it would float.
//! - **Section inference.** Every section (maximal live set) is a clique; its unplaced buffers must
//!   stack above the lowest `min_offset` among them and above the current offset, so
//!   `max(low, o) + unplaced total <= capacity`. This is LOAD made dynamic: it charges the space
//!   already wasted below each section's unplaced buffers.
//! - **Stranded buffers.** A buffer below the last placement in canonical order (a lower offset,
//!   or the same with a lower rank) can only rest on a buffer placed later: it starts at least at
//!   the lowest top an unplaced conflict can reach, and with no unplaced conflict the branch is
//!   dead. Those starts feed the section checks. Every later candidate of a node strands at least
//!   the earlier ones, no lower, so before each candidate after the first one check at its level
//!   cuts all that remain when stranding alone already fails (not one failed placement each).
//! - **Nogood memo.** A subproblem's outcome depends only on its unplaced buffers, their
//!   `min_offset`s and a few placed neighbours; failures are remembered by fingerprint and reused
//!   across the restarts of a probe (see `memo`).
//! - **Hatless pruning.** If the buffer just placed conflicts with no unplaced buffer and its subtree
//!   fails, no sibling can succeed.
//! - **Dynamic decomposition.** After each placement, the unplaced buffers split at every section
//!   boundary that none of them crosses; the pieces are independent and solved one after the other,
//!   so a failing piece never makes the search re-enumerate another piece's placements.
//! - **Exact cover for exactly-full parts.** A time-connected part whose every section is loaded to
//!   exactly the capacity (a perfect packing at its bound) is an exact cover of the (section, byte)
//!   grid; the static runs decide it with a dedicated search that branches on the most constrained
//!   free-range boundary and checks every range's subset sums across time (see `tiling`). The
//!   randomised runs keep the canonical search on those parts too.
//! - **Restarts** over a portfolio of seven static preorders (SWA and every order of W, A, T:
//!   start time, lifetime width, area, heaviest section), dealt out among parallel provers, with a
//!   node limit doubling each round, alternating with randomised preorders under Luby-sized
//!   limits (see `prover`): the tree size is heavy-tailed in the preorder (a few hundred nodes
//!   under one, millions under another). "Stopped" is not "proved infeasible"; a proof names the
//!   time-connected part that has no placement.
//!
//! [`Prepared`] holds what depends only on the instance (sections, conflicts, preorders), so a
//! portfolio worker builds it once and runs many searches on it.

use crate::time::Instant;

use super::Buffer;
use super::bound::{Sections, max_load_over_life};
use super::index::conflict_csr;

mod memo;
mod prover;
mod search;
mod tiling;

pub(crate) use memo::Memo;
pub(crate) use prover::{Event, Prover};
use search::{RunEnd, Search};

/// Result of a decision search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A placement within the capacity (offsets in input order).
    Found(Vec<u64>),
    /// No placement within the capacity exists; the reason says how that was shown.
    Infeasible(Infeasibility),
    /// The deadline passed (or the search was cancelled) first.
    Timeout,
}

/// Why a capacity is proved too small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Infeasibility {
    /// Buffer `index` alone is larger than the capacity.
    Buffer { index: usize, size: u64 },
    /// The `buffers` buffers live at time `time` need `load` bytes together.
    Load {
        time: u64,
        load: u64,
        buffers: usize,
    },
    /// The exhaustive search found no placement of the `buffers` buffers that are live between
    /// times `from` and `to` inclusive (a part of the instance that no buffer links to the rest;
    /// `from == to` when they are all live together).
    Search { buffers: usize, from: u64, to: u64 },
}

impl std::fmt::Display for Infeasibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Infeasibility::Buffer { index, size } => {
                write!(f, "buffer {index} alone needs {size} bytes")
            }
            Infeasibility::Load {
                time,
                load,
                buffers,
            } => match buffers {
                1 => write!(f, "{} needs {load} bytes", Live(1, *time, *time)),
                _ => write!(
                    f,
                    "{} need {load} bytes together",
                    Live(*buffers, *time, *time)
                ),
            },
            Infeasibility::Search { buffers, from, to } => write!(
                f,
                "the exact search exhausted every canonical placement of {} without finding one",
                Live(*buffers, *from, *to)
            ),
        }
    }
}

/// The first node limit of the restart schedule for `n` buffers (MiniMalloc's 2n, at least 1000).
pub(crate) fn first_node_limit(n: usize) -> u64 {
    (2 * n as u64).max(1000)
}

/// "the 3 buffers live at step 5", "the buffer live at step 5", "the 4 buffers live between steps
/// 2 and 9": a set of buffers named by their count and the steps at which they are live, `from`
/// to `to` inclusive (a single step is never written as a range).
pub(crate) struct Live(pub usize, pub u64, pub u64);

impl std::fmt::Display for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Live(count, from, to) = *self;
        match count {
            1 => write!(f, "the buffer live")?,
            _ => write!(f, "the {count} buffers live")?,
        }
        if from == to {
            write!(f, " at step {from}")
        } else {
            write!(f, " between steps {from} and {to}")
        }
    }
}

/// Static preorders for the restarts: S = start time (earliest first), W = lifetime width,
/// A = area, T = heaviest section touched (the others largest first). SWA, then MiniMalloc's
/// three (WAT, TAW, TWA), then the other orders of its keys.
pub(crate) const PREORDERS: usize = 7;
const PREORDER_KEYS: [[u8; 3]; PREORDERS] = [
    *b"SWA", *b"WAT", *b"TAW", *b"TWA", *b"ATW", *b"AWT", *b"WTA",
];

/// The instance-only part of the search, computed once.
pub(crate) struct Prepared {
    size: Vec<u64>,
    align: Vec<u64>,
    /// First and last (inclusive) section of each buffer.
    first: Vec<u32>,
    last: Vec<u32>,
    /// Representative time of each section (for infeasibility reasons).
    section_time: Vec<u64>,
    /// Summed size of each section's buffers.
    section_total: Vec<u64>,
    /// CSR: `member_list[member_start[s]..member_start[s + 1]]` are section `s`'s buffers.
    member_start: Vec<usize>,
    member_list: Vec<u32>,
    /// CSR conflict lists.
    conflict_start: Vec<usize>,
    conflict_list: Vec<u32>,
    /// Rank of each buffer under each preorder (0 = first).
    ranks: [Vec<u32>; PREORDERS],
    /// The previous buffer, by id, with the same lifetime, size and alignment: identical buffers
    /// are interchangeable, so the search places each only after its twin (symmetry breaking).
    twin: Vec<Option<u32>>,
    /// The groups of two or more identical buffers, ids ascending, one after the other, and the
    /// end of each group in `twin_members` (see [`Self::order_twins`]).
    twin_members: Vec<u32>,
    twin_group_end: Vec<usize>,
    /// CSR: `life_list[life_start[i]..life_start[i + 1]]` are the other buffers with exactly
    /// buffer `i`'s lifetime (see `Search::stack_swappable`).
    life_start: Vec<usize>,
    life_list: Vec<u32>,
    /// Search nodes of every run on this instance so far (canonical and exact-cover nodes).
    nodes: std::cell::Cell<u64>,
}

impl Prepared {
    /// Precomputes sections, conflicts, membership and the preorders of valid buffers.
    pub(crate) fn new(buffers: &[Buffer]) -> Prepared {
        let n = buffers.len();
        let sections = Sections::new(buffers);
        let mut counts = vec![0usize; sections.len() + 1];
        for i in 0..n {
            for s in sections.first[i]..=sections.last[i] {
                counts[s as usize + 1] += 1;
            }
        }
        for s in 0..sections.len() {
            counts[s + 1] += counts[s];
        }
        let mut fill = counts.clone();
        let mut member_list = vec![0u32; counts[sections.len()]];
        for i in 0..n {
            for s in sections.first[i]..=sections.last[i] {
                member_list[fill[s as usize]] = i as u32;
                fill[s as usize] += 1;
            }
        }
        let (conflict_start, conflict_list) = conflict_csr(buffers);
        let heaviest = max_load_over_life(buffers);
        let ranks = PREORDER_KEYS.map(|pre| {
            let key = |i: usize| {
                let b = &buffers[i];
                let w = (b.upper - b.lower) as u128;
                let field = |c: u8| match c {
                    b'W' => w,
                    b'S' => u128::from(u64::MAX - b.lower),
                    b'A' => w * b.size as u128,
                    _ => heaviest[i] as u128,
                };
                std::cmp::Reverse((field(pre[0]), field(pre[1]), field(pre[2])))
            };
            let order = super::greedy::order_by(n, key);
            let mut rank = vec![0u32; n];
            for (r, &i) in order.iter().enumerate() {
                rank[i as usize] = r as u32;
            }
            rank
        });
        let mut by_shape: Vec<u32> = (0..n as u32).collect();
        by_shape.sort_unstable_by_key(|&i| {
            let b = &buffers[i as usize];
            (b.lower, b.upper, b.size, b.align, i)
        });
        let mut twin = vec![None; n];
        let (mut twin_members, mut twin_group_end) = (Vec::new(), Vec::new());
        for (k, w) in by_shape.windows(2).enumerate() {
            if buffers[w[0] as usize] == buffers[w[1] as usize] {
                twin[w[1] as usize] = Some(w[0]);
                if twin_members.last() != Some(&w[0]) {
                    twin_members.push(w[0]);
                }
                twin_members.push(w[1]);
                let last = by_shape.get(k + 2).map(|&x| buffers[x as usize]);
                if last != Some(buffers[w[1] as usize]) {
                    twin_group_end.push(twin_members.len());
                }
            }
        }
        // `by_shape` groups equal lifetimes together.
        let mut life_start = vec![0usize; n + 1];
        let mut life_list = Vec::new();
        let mut per_buffer: Vec<Vec<u32>> = vec![Vec::new(); n];
        let same = |a: u32, b: u32| {
            let (a, b) = (&buffers[a as usize], &buffers[b as usize]);
            (a.lower, a.upper) == (b.lower, b.upper)
        };
        let mut g = 0;
        while g < n {
            let mut h = g + 1;
            while h < n && same(by_shape[g], by_shape[h]) {
                h += 1;
            }
            for &i in &by_shape[g..h] {
                per_buffer[i as usize].extend(by_shape[g..h].iter().filter(|&&j| j != i));
            }
            g = h;
        }
        for (i, others) in per_buffer.iter().enumerate() {
            life_list.extend_from_slice(others);
            life_start[i + 1] = life_list.len();
        }
        Prepared {
            twin,
            twin_members,
            twin_group_end,
            life_start,
            life_list,
            nodes: std::cell::Cell::new(0),
            size: buffers.iter().map(|b| b.size).collect(),
            align: buffers.iter().map(|b| b.align).collect(),
            first: sections.first,
            last: sections.last,
            section_time: sections.rep,
            section_total: sections.total,
            member_start: counts,
            member_list,
            conflict_start,
            conflict_list,
            ranks,
        }
    }

    /// The rank of each buffer under preorder `preorder` (`< PREORDERS`).
    pub(crate) fn rank(&self, preorder: usize) -> &[u32] {
        &self.ranks[preorder % PREORDERS]
    }

    /// Makes a rank (a permutation, 0 = first) rank identical buffers in id order, keeping the
    /// set of ranks each group holds. The twin rule (a buffer is placed only after its identical
    /// predecessor by id) and the stack rule (same-lifetime buffers stacked directly go up in rank
    /// order) pick the same representative only then: under a rank that reverses two identical
    /// buffers, a column that only they can fill is excluded by one rule or the other, and the
    /// search "proves" a feasible capacity infeasible. The static preorders already have this
    /// property (equal keys, ties by id); randomised ones get it here.
    pub(crate) fn order_twins(&self, rank: &mut [u32]) {
        let mut ranks = Vec::new();
        let mut start = 0;
        for &end in &self.twin_group_end {
            let group = &self.twin_members[start..end];
            ranks.clear();
            ranks.extend(group.iter().map(|&i| rank[i as usize]));
            ranks.sort_unstable();
            for (&i, &r) in group.iter().zip(&ranks) {
                rank[i as usize] = r;
            }
            start = end;
        }
    }

    /// Number of buffers.
    pub(crate) fn len(&self) -> usize {
        self.size.len()
    }

    fn conflicts(&self, i: usize) -> &[u32] {
        &self.conflict_list[self.conflict_start[i]..self.conflict_start[i + 1]]
    }

    fn same_lifetime(&self, i: usize) -> &[u32] {
        &self.life_list[self.life_start[i]..self.life_start[i + 1]]
    }

    fn section_members(&self, s: usize) -> &[u32] {
        &self.member_list[self.member_start[s]..self.member_start[s + 1]]
    }

    /// Proofs that need no search: a buffer or a live set larger than the capacity.
    pub(crate) fn quick_infeasibility(&self, capacity: u64) -> Option<Infeasibility> {
        if let Some((index, &size)) = self.size.iter().enumerate().find(|(_, s)| **s > capacity) {
            return Some(Infeasibility::Buffer { index, size });
        }
        let s = self.section_total.iter().position(|&t| t > capacity)?;
        Some(Infeasibility::Load {
            time: self.section_time[s],
            load: self.section_total[s],
            buffers: self.section_members(s).len(),
        })
    }

    /// One search run at `capacity` under preorder `preorder` (`< PREORDERS`), stopped after
    /// `node_limit` nodes, at `deadline` or when `stop` returns true (polled every 256 nodes).
    /// `memo` holds the failures proved by earlier runs at this capacity under this preorder (or
    /// is empty) and receives this run's. With `tiling_memo` (the exact-cover search's failures at
    /// this capacity, and the seed of its option order, 0 for largest first), the exactly-full
    /// parts are decided by that search instead (see `tiling`).
    #[allow(clippy::too_many_arguments, reason = "one run's budget and memos")]
    pub(crate) fn run(
        &self,
        capacity: u64,
        preorder: usize,
        node_limit: u64,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
        memo: &mut Memo,
        tiling_memo: Option<(&mut Memo, u64)>,
    ) -> Outcome {
        self.search(
            capacity,
            &self.ranks[preorder % PREORDERS],
            (node_limit, deadline, stop),
            memo,
            tiling_memo,
        )
    }

    /// [`Self::run`] under any static rank (a permutation of the buffers, 0 = first) that ranks
    /// identical buffers in id order (see [`Self::order_twins`]).
    pub(crate) fn run_ranked(
        &self,
        capacity: u64,
        rank: &[u32],
        node_limit: u64,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
        memo: &mut Memo,
    ) -> Outcome {
        self.search(capacity, rank, (node_limit, deadline, stop), memo, None)
    }

    /// One run: quick proofs, then the search.
    fn search(
        &self,
        capacity: u64,
        rank: &[u32],
        budget: (u64, Instant, &dyn Fn() -> bool),
        memo: &mut Memo,
        tiling_memo: Option<(&mut Memo, u64)>,
    ) -> Outcome {
        if let Some(why) = self.quick_infeasibility(capacity) {
            return Outcome::Infeasible(why);
        }
        let search = Search::new(self, rank, capacity, budget, memo, tiling_memo);
        let (end, nodes) = search.run();
        self.nodes.set(self.nodes.get() + nodes);
        match end {
            RunEnd::Found(offsets) => Outcome::Found(offsets),
            RunEnd::Exhausted {
                buffers,
                first,
                last,
            } => Outcome::Infeasible(Infeasibility::Search {
                buffers,
                from: self.section_time[first as usize],
                to: self.section_time[last as usize],
            }),
            RunEnd::Aborted => Outcome::Timeout,
        }
    }

    /// Search nodes of every run on this instance so far.
    pub(crate) fn nodes(&self) -> u64 {
        self.nodes.get()
    }

    /// The first node limit of the restart schedule for this instance.
    pub(crate) fn initial_node_limit(&self) -> u64 {
        first_node_limit(self.size.len())
    }
}

#[cfg(test)]
mod tests;
