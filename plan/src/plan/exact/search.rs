//! One depth-first decision search at a fixed capacity, static preorder and node limit.
//!
//! State lives in flat per-buffer and per-section arrays restored from an undo log, never copied.
//! The unplaced buffers of a subproblem ("piece") are kept sorted by first section, so splitting a
//! piece at the section boundaries no unplaced buffer crosses is one linear pass.

mod place;

use crate::time::Instant;

use super::Prepared;
use super::memo::{Fingerprint, Memo};
use super::tiling::{Tiling, TilingEnd};

/// How a search run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// Every buffer placed within the capacity (offsets in the prepared instance's order).
    Found(Vec<u64>),
    /// The tree was exhausted: no placement within the capacity exists. The time-connected part
    /// that has none: its buffer count and its first and last section.
    Exhausted {
        buffers: usize,
        first: u32,
        last: u32,
    },
    /// The node limit, the deadline or the stop signal ended the run first.
    Aborted,
}

/// One undoable change.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// The buffer was placed (undo: unplace it).
    Placed(u32),
    MinOffset(u32, u64),
    Low(u32, u64),
    Total(u32, u64),
}

/// A subproblem: unplaced buffers sorted by first section, and the section range they cover.
struct Piece {
    members: Vec<u32>,
    first: u32,
    last: u32,
}

pub(super) struct Search<'a> {
    p: &'a Prepared,
    rank: &'a [u32],
    capacity: u64,
    /// Aligned top of the highest placed conflict of each unplaced buffer: nothing placed later can
    /// go below the current offset, so a buffer can only rest there or higher.
    min_offset: Vec<u64>,
    /// Offset of each placed buffer.
    offset: Vec<u64>,
    placed: Vec<bool>,
    /// Per section: the lowest `min_offset` of its unplaced members (at least the top of its placed
    /// members, since each of those conflicts with every unplaced member).
    low: Vec<u64>,
    /// Per section: the summed size of its unplaced members.
    total: Vec<u64>,
    /// Per section: the node stamp at which `low` was last recomputed (deduplicates the updates).
    stamp: Vec<u64>,
    log: Vec<Change>,
    /// Scratch list of (earliest start, size) of one section's unplaced members.
    scratch: Vec<(u64, u64)>,
    /// Scratch reachability over a piece's section boundaries (see `tileable`).
    reach: Vec<bool>,
    /// Scratch: the distinct starts of the piece's tight sections.
    levels: Vec<u64>,
    /// Per unplaced buffer of the current piece, set at each placement: the lowest offset it can
    /// still take, and whether it is stranded (see `place`).
    start: Vec<u64>,
    stranded: Vec<bool>,
    nodes: u64,
    node_limit: u64,
    deadline: Instant,
    stop: &'a dyn Fn() -> bool,
    aborted: bool,
    /// Failed states of this capacity and rank (shared with earlier runs of the same probe).
    memo: &'a mut Memo,
    /// When set, exactly-full parts are decided by the exact-cover search (see `tiling`), whose
    /// failed states this memo keeps across the probe's runs, under this option-order seed.
    tiling_memo: Option<(&'a mut Memo, u64)>,
}

impl<'a> Search<'a> {
    pub(super) fn new(
        p: &'a Prepared,
        rank: &'a [u32],
        capacity: u64,
        (node_limit, deadline, stop): (u64, Instant, &'a dyn Fn() -> bool),
        memo: &'a mut Memo,
        tiling_memo: Option<(&'a mut Memo, u64)>,
    ) -> Self {
        let n = p.size.len();
        let s = p.section_total.len();
        Search {
            p,
            rank,
            capacity,
            min_offset: vec![0; n],
            offset: vec![0; n],
            placed: vec![false; n],
            low: vec![0; s],
            total: p.section_total.clone(),
            stamp: vec![0; s],
            log: Vec::new(),
            scratch: Vec::new(),
            reach: Vec::new(),
            levels: Vec::new(),
            start: vec![0; n],
            stranded: vec![false; n],
            nodes: 0,
            node_limit,
            deadline,
            stop,
            aborted: false,
            memo,
            tiling_memo,
        }
    }

    /// Runs the search over the whole instance; also returns the nodes it searched.
    pub(super) fn run(mut self) -> (RunEnd, u64) {
        let end = self.run_pieces();
        (end, self.nodes)
    }

    fn run_pieces(&mut self) -> RunEnd {
        let mut all: Vec<u32> = (0..self.p.size.len() as u32).collect();
        all.sort_unstable_by_key(|&i| (self.p.first[i as usize], i));
        for piece in self.split(&all) {
            if self.tiling_memo.is_some() && self.exactly_full(&piece) {
                match self.tile(&piece) {
                    TilingEnd::Found => continue,
                    TilingEnd::Aborted => return RunEnd::Aborted,
                    TilingEnd::Exhausted => {
                        return RunEnd::Exhausted {
                            buffers: piece.members.len(),
                            first: piece.first,
                            last: piece.last,
                        };
                    }
                }
            }
            if !self.solve(&piece, (0, 0)) {
                if self.aborted {
                    return RunEnd::Aborted;
                }
                return RunEnd::Exhausted {
                    buffers: piece.members.len(),
                    first: piece.first,
                    last: piece.last,
                };
            }
        }
        RunEnd::Found(std::mem::take(&mut self.offset))
    }

    /// Whether every section of `piece` is loaded to exactly the capacity, and its grid is small
    /// enough for the exact-cover search.
    fn exactly_full(&self, piece: &Piece) -> bool {
        self.p.section_total[piece.first as usize..=piece.last as usize]
            .iter()
            .all(|&t| t == self.capacity)
            && Tiling::applies(
                self.p,
                &piece.members,
                piece.last - piece.first + 1,
                self.capacity,
            )
    }

    /// Decides an exactly-full top-level piece by exact cover, within this run's budget.
    fn tile(&mut self, piece: &Piece) -> TilingEnd {
        let Some((memo, shuffle)) = self.tiling_memo.as_mut() else {
            return TilingEnd::Aborted;
        };
        let mut tiling = Tiling::new(
            self.p,
            &piece.members,
            (piece.first, piece.last),
            self.capacity,
            &mut self.offset,
            self.node_limit.saturating_sub(self.nodes),
            self.deadline,
            self.stop,
            (&mut **memo, *shuffle),
        );
        let end = tiling.run();
        self.nodes += tiling.nodes;
        if end == TilingEnd::Found {
            for &x in &piece.members {
                self.placed[x as usize] = true;
            }
        }
        end
    }

    /// Splits buffers sorted by first section into time-independent pieces: a new piece starts at
    /// a section that no earlier buffer of the list reaches.
    fn split(&self, sorted: &[u32]) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        for &x in sorted {
            let (f, l) = (self.p.first[x as usize], self.p.last[x as usize]);
            match pieces.last_mut() {
                Some(piece) if f <= piece.last => {
                    piece.members.push(x);
                    piece.last = piece.last.max(l);
                }
                _ => pieces.push(Piece {
                    members: vec![x],
                    first: f,
                    last: l,
                }),
            }
        }
        pieces
    }

    /// Places every buffer of `piece` in canonical order after a placement at `parent` =
    /// (offset, rank). Returns whether it succeeded (state then holds the placement).
    fn solve(&mut self, piece: &Piece, parent: (u64, u32)) -> bool {
        self.nodes += 1;
        if self.nodes > self.node_limit
            || (self.nodes.is_multiple_of(256)
                && (Instant::now() >= self.deadline || (self.stop)()))
        {
            self.aborted = true;
            return false;
        }
        let key = self.fingerprint(piece, parent);
        if self.memo.failed(key) {
            return false;
        }
        let solved = self.branch(piece, parent);
        if !solved && !self.aborted {
            self.memo.record(key);
        }
        solved
    }

    /// The fingerprint of the subproblem `solve(piece, parent)` decides: everything its outcome
    /// depends on. The unplaced buffers (sorted, so equal sets give equal lists) with their
    /// `min_offset`s; the parent's (offset, rank) only when it filters some candidate now (later
    /// nodes filter by their own parent); and, for the stack symmetry, the tops of the placed
    /// buffers with a member's lifetime and a higher rank. Sections' floors and totals follow from
    /// these (every unplaced buffer of the piece's sections is a member).
    fn fingerprint(&self, piece: &Piece, parent: (u64, u32)) -> u128 {
        let p = self.p;
        let mut f = Fingerprint::new();
        let binding = piece
            .members
            .iter()
            .any(|&y| (self.min_offset[y as usize], self.rank[y as usize]) < parent);
        if binding {
            f.add(parent.0);
            f.add(u64::from(parent.1));
        } else {
            f.add(u64::MAX);
        }
        for &y in &piece.members {
            let y = y as usize;
            f.add(y as u64);
            f.add(self.min_offset[y]);
            for &z in p.same_lifetime(y) {
                let z = z as usize;
                if self.placed[z] && self.rank[z] > self.rank[y] {
                    f.add(!(z as u64));
                    f.add(self.offset[z] + p.size[z]);
                }
            }
        }
        f.finish()
    }

    /// The branching of one node: each eligible candidate at its `min_offset`, in canonical order.
    fn branch(&mut self, piece: &Piece, parent: (u64, u32)) -> bool {
        let mut cands = piece.members.clone();
        cands.sort_unstable_by_key(|&x| (self.min_offset[x as usize], self.rank[x as usize]));
        // Dominance: a candidate at or above `min_height` would leave some buffer floating over a
        // hole it fits in for its whole life, since nothing placed later goes lower.
        let min_height = cands
            .iter()
            .map(|&y| self.min_offset[y as usize] + self.p.size[y as usize])
            .min()
            .unwrap_or(u64::MAX);
        let mut tried = false;
        for &x in &cands {
            let xi = x as usize;
            let o = self.min_offset[xi];
            if o >= min_height {
                break;
            }
            if (o, self.rank[xi]) < parent {
                continue;
            }
            // Identical buffers are interchangeable: place them in rank order only.
            if let Some(twin) = self.p.twin[xi]
                && !self.placed[twin as usize]
            {
                continue;
            }
            if self.stack_swappable(xi, o) {
                continue;
            }
            if tried && self.strands_fatally(piece, o, self.rank[xi]) {
                break;
            }
            tried = true;
            let mark = self.log.len();
            let (ok, hat) = self.place(xi, o, piece);
            if ok {
                let rest: Vec<u32> = piece.members.iter().copied().filter(|&y| y != x).collect();
                let mut all = true;
                for sub in self.split(&rest) {
                    if !self.solve(&sub, (o, self.rank[xi])) {
                        all = false;
                        break;
                    }
                }
                if all {
                    return true;
                }
            }
            self.undo(mark);
            // Hatless: `x` conflicted with no unplaced buffer, so its subtree's failure did not
            // depend on it; no sibling can do better.
            if self.aborted || !hat {
                break;
            }
        }
        false
    }

    /// Stack symmetry: whether a placed buffer `z` with exactly `x`'s lifetime and a higher rank
    /// ends at `o`, and the two could swap (`x` at `z`'s offset, `z` right above it, alignments
    /// kept). Swapping such a pair leaves the occupied region unchanged, so every plan has a
    /// counterpart in which same-lifetime buffers stacked directly on each other go up in rank
    /// order; the search only builds those.
    fn stack_swappable(&self, x: usize, o: u64) -> bool {
        let p = self.p;
        p.same_lifetime(x).iter().any(|&z| {
            let z = z as usize;
            if !self.placed[z] || self.rank[z] < self.rank[x] {
                return false;
            }
            let oz = self.offset[z];
            oz + p.size[z] == o
                && oz.is_multiple_of(p.align[x])
                && (oz + p.size[x]).is_multiple_of(p.align[z])
        })
    }

    /// Reverts everything since `mark`, including the placements of pieces solved below it.
    fn undo(&mut self, mark: usize) {
        while self.log.len() > mark {
            match self.log.pop() {
                Some(Change::Placed(y)) => self.placed[y as usize] = false,
                Some(Change::MinOffset(y, v)) => self.min_offset[y as usize] = v,
                Some(Change::Low(s, v)) => self.low[s as usize] = v,
                Some(Change::Total(s, v)) => self.total[s as usize] = v,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests;
