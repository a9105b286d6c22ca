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
//!   stack above both the section's floor (top of its placed buffers) and the current offset, so
//!   `max(floor, o) + unplaced total <= capacity`. This is LOAD made dynamic.
//! - **Hatless pruning.** If the buffer just placed conflicts with no unplaced buffer and its subtree
//!   fails, no sibling can succeed.
//! - **Decomposition** into time-connected parts, **restarts** over three static preorders (WAT,
//!   TAW, TWA: lifetime width, area, heaviest section) with a node limit that doubles each round, and
//!   a deadline. "Timed out" is distinct from "proved infeasible".
//!
//! State lives in flat per-buffer arrays and is restored from an undo log, never copied.

use crate::time::Instant;

use super::bound::{Sections, components, max_load_over_life};
use super::index::conflict_csr;
use super::{Buffer, align_up};

/// Result of one decision search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A placement within the capacity (offsets in input order).
    Found(Vec<u64>),
    /// The search completed: no placement within the capacity exists.
    Infeasible,
    /// The deadline passed first.
    Timeout,
}

/// Decides whether `buffers` (valid, see [`super::validate`]) fit within `capacity`.
pub(crate) fn decide(buffers: &[Buffer], capacity: u64, deadline: Instant) -> Outcome {
    let mut offsets = vec![0u64; buffers.len()];
    let mut timed_out = false;
    for group in components(buffers) {
        let local: Vec<Buffer> = group.iter().map(|&i| buffers[i]).collect();
        match decide_connected(&local, capacity, deadline) {
            Outcome::Found(o) => {
                for (k, &i) in group.iter().enumerate() {
                    offsets[i] = o[k];
                }
            }
            Outcome::Infeasible => return Outcome::Infeasible,
            Outcome::Timeout => timed_out = true,
        }
    }
    if timed_out {
        Outcome::Timeout
    } else {
        Outcome::Found(offsets)
    }
}

/// Static preorders for the restarts: W = lifetime width, A = area, T = heaviest section touched.
const PREORDERS: [[u8; 3]; 3] = [*b"WAT", *b"TAW", *b"TWA"];

fn decide_connected(buffers: &[Buffer], capacity: u64, deadline: Instant) -> Outcome {
    let n = buffers.len();
    if buffers.iter().any(|b| b.size > capacity) {
        return Outcome::Infeasible;
    }
    let sections = Sections::new(buffers);
    if sections.total.iter().any(|&t| t > capacity) {
        return Outcome::Infeasible;
    }
    let heaviest = max_load_over_life(buffers);
    let conflicts = conflict_csr(buffers);
    let mut node_limit = (2 * n as u64).max(1000);
    loop {
        for pre in PREORDERS {
            let key = |i: usize| {
                let b = &buffers[i];
                let w = b.upper - b.lower;
                let a = w as u128 * b.size as u128;
                let t = heaviest[i];
                let field = |c: u8| match c {
                    b'W' => w as u128,
                    b'A' => a,
                    _ => t as u128,
                };
                std::cmp::Reverse((field(pre[0]), field(pre[1]), field(pre[2])))
            };
            let order = super::greedy::order_by(n, key);
            let mut rank = vec![0u32; n];
            for (r, &i) in order.iter().enumerate() {
                rank[i as usize] = r as u32;
            }
            let mut search = Search::new(
                buffers, &sections, &conflicts, rank, capacity, node_limit, deadline,
            );
            if search.dfs(0, 0) {
                return Outcome::Found(search.offset);
            }
            if !search.aborted {
                return Outcome::Infeasible;
            }
            if Instant::now() >= deadline {
                return Outcome::Timeout;
            }
        }
        node_limit = node_limit.saturating_mul(2);
    }
}

/// One undoable change.
#[derive(Debug, Clone, Copy)]
enum Change {
    MinOffset(u32, u64),
    Floor(u32, u64),
    Total(u32, u64),
}

struct Search<'a> {
    size: Vec<u64>,
    align: Vec<u64>,
    conflicts: &'a (Vec<usize>, Vec<u32>),
    first: &'a [u32],
    last: &'a [u32],
    rank: Vec<u32>,
    capacity: u64,
    /// Aligned top of the highest placed conflict of each unplaced buffer.
    min_offset: Vec<u64>,
    /// Offset of each placed buffer.
    offset: Vec<u64>,
    placed: Vec<bool>,
    /// Unplaced buffers (any order) and each one's position in it.
    unplaced: Vec<u32>,
    position: Vec<u32>,
    /// Top of the highest placed buffer in each section.
    floor: Vec<u64>,
    /// Summed size of the unplaced buffers of each section.
    total: Vec<u64>,
    log: Vec<Change>,
    /// Candidate lists reused per depth.
    pool: Vec<Vec<u32>>,
    nodes: u64,
    node_limit: u64,
    deadline: Instant,
    aborted: bool,
}

impl<'a> Search<'a> {
    fn new(
        buffers: &[Buffer],
        sections: &'a Sections,
        conflicts: &'a (Vec<usize>, Vec<u32>),
        rank: Vec<u32>,
        capacity: u64,
        node_limit: u64,
        deadline: Instant,
    ) -> Self {
        let n = buffers.len();
        Search {
            size: buffers.iter().map(|b| b.size).collect(),
            align: buffers.iter().map(|b| b.align).collect(),
            conflicts,
            first: &sections.first,
            last: &sections.last,
            rank,
            capacity,
            min_offset: vec![0; n],
            offset: vec![0; n],
            placed: vec![false; n],
            unplaced: (0..n as u32).collect(),
            position: (0..n as u32).collect(),
            floor: vec![0; sections.len()],
            total: sections.total.clone(),
            log: Vec::new(),
            pool: Vec::new(),
            nodes: 0,
            node_limit,
            deadline,
            aborted: false,
        }
    }

    /// Searches below a node whose last placement was at `parent_offset` with `parent_rank`.
    fn dfs(&mut self, parent_offset: u64, parent_rank: u32) -> bool {
        if self.unplaced.is_empty() {
            return true;
        }
        self.nodes += 1;
        if self.nodes > self.node_limit
            || (self.nodes.is_multiple_of(256) && Instant::now() >= self.deadline)
        {
            self.aborted = true;
            return false;
        }
        let depth = self.size.len() - self.unplaced.len();
        let mut cands = if depth < self.pool.len() {
            std::mem::take(&mut self.pool[depth])
        } else {
            Vec::new()
        };
        cands.clear();
        cands.extend_from_slice(&self.unplaced);
        cands.sort_unstable_by_key(|&x| (self.min_offset[x as usize], self.rank[x as usize]));
        let min_height = cands
            .iter()
            .map(|&y| self.min_offset[y as usize] + self.size[y as usize])
            .min()
            .unwrap_or(u64::MAX);
        let mut found = false;
        for &x in &cands {
            let xi = x as usize;
            let o = self.min_offset[xi];
            if o >= min_height {
                break;
            }
            if (o, self.rank[xi]) < (parent_offset, parent_rank)
                || o + self.size[xi] > self.capacity
            {
                continue;
            }
            let mark = self.log.len();
            let (ok, hat) = self.place(xi, o);
            if ok && self.dfs(o, self.rank[xi]) {
                found = true;
                break;
            }
            self.undo(xi, mark);
            if self.aborted || !hat {
                break;
            }
        }
        if depth >= self.pool.len() {
            self.pool.resize_with(depth + 1, Vec::new);
        }
        self.pool[depth] = cands;
        found
    }

    /// Places `x` at `o` and propagates. Returns (still consistent, x conflicts with an unplaced buffer).
    fn place(&mut self, x: usize, o: u64) -> (bool, bool) {
        self.placed[x] = true;
        self.offset[x] = o;
        let p = self.position[x] as usize;
        self.unplaced.swap_remove(p);
        if let Some(&moved) = self.unplaced.get(p) {
            self.position[moved as usize] = p as u32;
        }
        let top = o + self.size[x];
        let (start, list) = self.conflicts;
        let mut hat = false;
        let mut ok = true;
        for &y in &list[start[x]..start[x + 1]] {
            let y = y as usize;
            if self.placed[y] {
                continue;
            }
            hat = true;
            let raised = align_up(top, self.align[y]);
            if raised > self.min_offset[y] {
                self.log
                    .push(Change::MinOffset(y as u32, self.min_offset[y]));
                self.min_offset[y] = raised;
                if raised + self.size[y] > self.capacity {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            return (false, hat);
        }
        for s in self.first[x] as usize..=self.last[x] as usize {
            self.log.push(Change::Floor(s as u32, self.floor[s]));
            self.log.push(Change::Total(s as u32, self.total[s]));
            self.floor[s] = self.floor[s].max(top);
            self.total[s] -= self.size[x];
        }
        // Section inference: unplaced members of a section stack above max(floor, o).
        let ok = self
            .floor
            .iter()
            .zip(&self.total)
            .all(|(&f, &t)| t == 0 || f.max(o) + t <= self.capacity);
        (ok, hat)
    }

    /// Reverts everything since `mark` and unplaces `x`.
    fn undo(&mut self, x: usize, mark: usize) {
        while self.log.len() > mark {
            match self.log.pop() {
                Some(Change::MinOffset(y, v)) => self.min_offset[y as usize] = v,
                Some(Change::Floor(s, v)) => self.floor[s as usize] = v,
                Some(Change::Total(s, v)) => self.total[s as usize] = v,
                None => break,
            }
        }
        self.placed[x] = false;
        self.position[x] = self.unplaced.len() as u32;
        self.unplaced.push(x as u32);
    }
}

#[cfg(test)]
mod tests;
