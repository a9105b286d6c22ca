//! Placing one buffer in the decision search and propagating it: raised offsets, stranded
//! buffers, the per-section energy bound, the zero-slack tiling check of tight sections, and the
//! stranding cut of a node's remaining candidates.

use super::{Change, Piece, Search};
use crate::plan::align_up;

impl Search<'_> {
    /// Places `x` at `o` and propagates. Returns (still consistent, `x` conflicts with an unplaced
    /// buffer).
    pub(super) fn place(&mut self, x: usize, o: u64, piece: &Piece) -> (bool, bool) {
        let p = self.p;
        self.log.push(Change::Placed(x as u32));
        self.placed[x] = true;
        self.offset[x] = o;
        let top = o + p.size[x];
        if top > self.capacity {
            return (false, false);
        }
        let stamp = self.nodes;
        let mut hat = false;
        for s in p.first[x]..=p.last[x] {
            let s = s as usize;
            self.log.push(Change::Total(s as u32, self.total[s]));
            self.total[s] -= p.size[x];
            self.stamp[s] = stamp;
        }
        for &y in p.conflicts(x) {
            let y = y as usize;
            if self.placed[y] {
                continue;
            }
            hat = true;
            let raised = align_up(top, p.align[y]);
            if raised > self.min_offset[y] {
                self.log
                    .push(Change::MinOffset(y as u32, self.min_offset[y]));
                self.min_offset[y] = raised;
                if raised + p.size[y] > self.capacity {
                    return (false, hat);
                }
                for s in p.first[y]..=p.last[y] {
                    self.stamp[s as usize] = stamp;
                }
            }
        }
        // Stranded buffers: an unplaced `y` below the new parent `(o, rank x)` in canonical order
        // cannot be placed where it rests now, nor at `o`; it can only rest on a buffer placed
        // later, so it starts at or above the lowest top such a conflict can have. With no
        // unplaced conflict left it can never be placed: the branch is dead.
        let rank_x = self.rank[x];
        for &y in &piece.members {
            let y = y as usize;
            if self.placed[y] {
                continue;
            }
            let stranded = (self.min_offset[y], self.rank[y]) < (o, rank_x);
            self.stranded[y] = stranded;
            if !stranded {
                self.start[y] = self.min_offset[y].max(o);
                continue;
            }
            let Some(start) = self.stranded_start(y, o) else {
                return (false, hat);
            };
            self.start[y] = start;
            for s in p.first[y]..=p.last[y] {
                self.stamp[s as usize] = stamp;
            }
        }
        // Where starts rose (the sections of `x`, of every raised buffer and of every stranded
        // one), refresh `low` and check the energy bound: the unplaced members of a section that
        // cannot start below `v` stack within `[v, capacity)`, for every such threshold `v`.
        for s in piece.first..=piece.last {
            let s = s as usize;
            if self.stamp[s] != stamp || self.total[s] == 0 {
                continue;
            }
            self.scratch.clear();
            let mut low = u64::MAX;
            for &y in p.section_members(s) {
                let y = y as usize;
                if !self.placed[y] {
                    low = low.min(self.min_offset[y]);
                    self.scratch.push((self.start[y], p.size[y]));
                }
            }
            if low != self.low[s] {
                self.log.push(Change::Low(s as u32, self.low[s]));
                self.low[s] = low;
            }
            if self.scratch_overflows() {
                return (false, hat);
            }
        }
        // Section inference: each section's unplaced members stack above its lowest possible
        // start, and nothing goes below `o` any more.
        self.levels.clear();
        for s in piece.first..=piece.last {
            let s = s as usize;
            let t = self.total[s];
            let start = self.low[s].max(o);
            if t > 0 && start + t > self.capacity {
                return (false, hat);
            }
            if t > 0 && start + t == self.capacity {
                self.levels.push(start);
            }
        }
        self.levels.sort_unstable();
        self.levels.dedup();
        let levels = std::mem::take(&mut self.levels);
        let ok = levels.iter().all(|&level| self.tileable(piece, o, level));
        self.levels = levels;
        (ok, hat)
    }

    /// Zero-slack tiling. In a *tight* section (unplaced members exactly fill `[start, capacity)`,
    /// `start = max(low, o)`) the bottom member must start exactly at `start`. Buffers starting at
    /// one level never share a section, so the tight sections at each tight `level` must be
    /// covered, left to right, by disjoint unplaced buffers that can start there
    /// (`max(min_offset, o) == level`); other sections may be covered or not. A reachability pass
    /// over the piece's sections decides it in O(sections + members).
    fn tileable(&mut self, piece: &Piece, o: u64, level: u64) -> bool {
        let p = self.p;
        let (first, last) = (piece.first as usize, piece.last as usize);
        self.reach.clear();
        self.reach.resize(last - first + 2, false);
        self.reach[0] = true;
        let mut members = piece.members.iter().peekable();
        for s in first..=last {
            let here = self.reach[s - first];
            let t = self.total[s];
            let required = t > 0 && self.low[s].max(o) == level && level + t == self.capacity;
            if here && !required {
                self.reach[s + 1 - first] = true;
            }
            while let Some(&&y) = members.peek() {
                let y = y as usize;
                if p.first[y] as usize != s {
                    break;
                }
                members.next();
                if here && !self.placed[y] && !self.stranded[y] && self.start[y] == level {
                    self.reach[p.last[y] as usize + 1 - first] = true;
                }
            }
        }
        self.reach[last + 1 - first]
    }

    /// The lowest start of unplaced buffer `y` stranded below offset `o`: aligned at or above the
    /// lowest top an unplaced conflict of it can reach from `o`. `None` when it has no unplaced
    /// conflict to rest on or does not fit below the capacity from there (the branch is dead).
    fn stranded_start(&self, y: usize, o: u64) -> Option<u64> {
        let p = self.p;
        let lowest_top = p
            .conflicts(y)
            .iter()
            .map(|&z| z as usize)
            .filter(|&z| !self.placed[z])
            .map(|z| self.min_offset[z].max(o) + p.size[z])
            .min()?;
        let start = align_up(lowest_top, p.align[y]);
        (start + p.size[y] <= self.capacity).then_some(start)
    }

    /// Whether every candidate from `(o, rank)` on in canonical order is bound to fail: each
    /// unplaced buffer before it is stranded in all those branches, so it starts at or above the
    /// lowest top an unplaced conflict can reach from `o` (a bound valid in every such branch,
    /// since offsets only rise), and the others at or above `o`; the energy bound on those starts
    /// must hold in every section. One check cuts a node's remaining candidates together once a
    /// stranded buffer has no room left, where placing each of them would find it again.
    pub(super) fn strands_fatally(&mut self, piece: &Piece, o: u64, rank: u32) -> bool {
        let p = self.p;
        for &y in &piece.members {
            let y = y as usize;
            let mo = self.min_offset[y];
            if (mo, self.rank[y]) >= (o, rank) {
                self.start[y] = mo.max(o);
                continue;
            }
            let Some(start) = self.stranded_start(y, o) else {
                return true;
            };
            self.start[y] = start;
        }
        for s in piece.first..=piece.last {
            let s = s as usize;
            if self.total[s] == 0 {
                continue;
            }
            self.scratch.clear();
            for &y in p.section_members(s) {
                let y = y as usize;
                if !self.placed[y] {
                    self.scratch.push((self.start[y], p.size[y]));
                }
            }
            if self.scratch_overflows() {
                return true;
            }
        }
        false
    }

    /// Whether the `(start, size)` pairs in `scratch`, stacked from the latest start down (each
    /// above all that start later), pass the capacity. Sorts `scratch`.
    #[inline]
    fn scratch_overflows(&mut self) -> bool {
        self.scratch
            .sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
        let mut stacked = 0u64;
        for &(v, size) in &self.scratch {
            stacked += size;
            if v + stacked > self.capacity {
                return true;
            }
        }
        false
    }
}
