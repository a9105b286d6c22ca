//! Exact-cover search for exactly-full parts: the parts of an instance whose every section is
//! loaded to exactly the capacity (perfect packings, MiniMalloc's "challenging" sets at their
//! bound).
//!
//! In such a part the buffers live in a section tile `[0, capacity)` with no byte to spare, so the
//! problem is an exact cover of the (section, byte) grid. Take any free range of a section (a
//! maximal run of bytes no placed buffer live there covers): some unplaced buffer live in that
//! section must start exactly at its bottom, and some must end exactly at its top. Each such
//! boundary is a choice point whose options are the buffers that fit there over their whole life.
//! The search branches on the choice point with the fewest options (the "minimum remaining values"
//! rule of exact-cover solvers, Knuth's Algorithm X): a boundary with one option is a forced move,
//! with none the branch is dead. Where the canonical offset-order search (`search`) sees only
//! per-section byte totals, this one follows the constraints across time: freeing a buffer opens
//! a range that the buffers entering there must fill exactly.
//!
//! - **Propagation.** Before branching: every unplaced buffer needs a free run of its size in the
//!   union of its sections' rows (where else could it go?), and every free range of every section
//!   must be a subset sum of the sizes of the unplaced buffers live there that have such a run
//!   inside it: a range that no combination fills exactly is a dead branch, long before a boundary
//!   runs out of options.
//! - **Twins.** Buffers with the same sections, size and alignment are interchangeable: one option
//!   per such class.
//! - **Memo.** A state is the set of (class, offset) placed, hashed incrementally (Zobrist);
//!   failed states are remembered across runs of the probe.
//!
//! The grid is a bitset per section in units of the gcd of the part's sizes and the capacity
//! (offsets are sums of sizes from 0 in a tiling); [`Tiling::applies`] says when it is small
//! enough.

mod bits;
mod propagate;

use crate::time::Instant;

use super::Prepared;
use super::memo::Memo;
#[cfg(test)]
use bits::shift_or;
use bits::{any_set, flip, next_bit};

/// Largest grid, in bits, the search takes on (sections times capacity units): 2 MiB of bitsets.
const MAX_GRID_BITS: u64 = 1 << 24;

/// Largest propagation cost per node, in bitset words read (each member's row union over its
/// sections): about 10 ms, so that the deadline, polled at every node, is met closely.
const MAX_NODE_WORDS: u64 = 1 << 24;

/// Largest capacity in units (a free-range scan per section per node costs this many bits / 64).
const MAX_UNITS: u64 = 1 << 16;

/// How a tiling search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TilingEnd {
    /// Every buffer of the part placed (offsets written).
    Found,
    /// No placement of the part within the capacity exists.
    Exhausted,
    /// The node limit, the deadline or the stop signal came first.
    Aborted,
}

/// One search over an exactly-full part; see the module docs.
pub(super) struct Tiling<'a> {
    p: &'a Prepared,
    /// The part's buffers, and each one's index among them.
    members: Vec<u32>,
    local: Vec<u32>,
    first: u32,
    sections: usize,
    unit: u64,
    words: usize,
    /// Occupied units per section of the part, `words` words each.
    grid: Vec<u64>,
    /// Per buffer: its interchangeability class (first, last, size, align), numbered.
    class: Vec<u32>,
    placed: Vec<bool>,
    offset: &'a mut [u64],
    remaining: usize,
    hash: u128,
    pub(super) nodes: u64,
    node_limit: u64,
    deadline: Instant,
    stop: &'a dyn Fn() -> bool,
    aborted: bool,
    memo: &'a mut Memo,
    /// 0: options largest first; otherwise the seed of a random option order (restarts under
    /// different orders cut the heavy tail of backtracking times).
    shuffle: u64,
    /// Scratch for `propagate`: a row union, each member's free runs (units), per-range sums.
    union: Vec<u64>,
    runs: Vec<(usize, usize)>,
    run_start: Vec<usize>,
    sums: Vec<u64>,
    ranges: Vec<(usize, usize, usize)>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The Zobrist key of `class` at `offset`: two SplitMix64-style mixes.
fn key(class: u32, offset: u64) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(u64::from(class).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ offset);
    let b = mix(a ^ offset.rotate_left(32) ^ 0x5851_f42d_4c95_7f2d);
    (u128::from(a) << 64) | u128::from(b)
}

impl<'a> Tiling<'a> {
    /// Whether the grid of a part over `sections` sections fits the search's limits.
    pub(super) fn applies(p: &Prepared, members: &[u32], sections: u32, capacity: u64) -> bool {
        let units = capacity / Self::unit_of(p, members, capacity);
        let words = units.div_ceil(64);
        let life = |&i: &u32| u64::from(p.last[i as usize] - p.first[i as usize] + 1);
        let lives: u64 = members.iter().map(life).sum();
        // Choosing tests each buffer at a boundary of each of its sections, over its life.
        let fits: u64 = members.iter().map(|i| life(i) * life(i)).sum();
        units <= MAX_UNITS
            && units * u64::from(sections) <= MAX_GRID_BITS
            && lives.saturating_mul(words) <= MAX_NODE_WORDS
            && fits <= MAX_NODE_WORDS
    }

    fn unit_of(p: &Prepared, members: &[u32], capacity: u64) -> u64 {
        members
            .iter()
            .fold(capacity, |g, &i| gcd(g, p.size[i as usize]))
            .max(1)
    }

    /// A search over `members` (a time-connected part whose sections `first..=last` are each
    /// loaded to exactly `capacity`; see [`Self::applies`]), writing offsets into `offset`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the search's budget and state, passed once"
    )]
    pub(super) fn new(
        p: &'a Prepared,
        members: &[u32],
        (first, last): (u32, u32),
        capacity: u64,
        offset: &'a mut [u64],
        node_limit: u64,
        deadline: Instant,
        stop: &'a dyn Fn() -> bool,
        (memo, shuffle): (&'a mut Memo, u64),
    ) -> Self {
        let n = p.len();
        let unit = Self::unit_of(p, members, capacity);
        let words = (capacity / unit).div_ceil(64) as usize;
        let sections = (last - first + 1) as usize;
        let mut grid = vec![0u64; sections * words];
        // Units past the capacity in the last word count as occupied.
        let units = (capacity / unit) as usize;
        if !units.is_multiple_of(64) {
            for s in 0..sections {
                grid[s * words + words - 1] = !0u64 << (units % 64);
            }
        }
        let mut by_class = members.to_vec();
        let shape = |i: u32| {
            let i = i as usize;
            (p.first[i], p.last[i], p.size[i], p.align[i])
        };
        by_class.sort_unstable_by_key(|&i| (shape(i), i));
        let mut class = vec![0u32; n];
        let mut c = 0u32;
        for (k, &i) in by_class.iter().enumerate() {
            if k > 0 && shape(by_class[k - 1]) != shape(i) {
                c += 1;
            }
            class[i as usize] = c;
        }
        let mut local = vec![0u32; n];
        for (k, &i) in members.iter().enumerate() {
            local[i as usize] = k as u32;
        }
        Tiling {
            p,
            members: members.to_vec(),
            local,
            first,
            sections,
            unit,
            words,
            grid,
            class,
            placed: vec![false; n],
            offset,
            remaining: members.len(),
            hash: 0,
            nodes: 0,
            node_limit,
            deadline,
            stop,
            aborted: false,
            memo,
            shuffle,
            union: Vec::new(),
            runs: Vec::new(),
            run_start: Vec::new(),
            sums: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Runs the search.
    pub(super) fn run(&mut self) -> TilingEnd {
        if self.solve() {
            TilingEnd::Found
        } else if self.aborted {
            TilingEnd::Aborted
        } else {
            TilingEnd::Exhausted
        }
    }

    fn solve(&mut self) -> bool {
        self.nodes += 1;
        // A node costs microseconds to milliseconds (see `MAX_NODE_WORDS`): poll every node.
        if self.nodes > self.node_limit || Instant::now() >= self.deadline || (self.stop)() {
            self.aborted = true;
            return false;
        }
        if self.remaining == 0 {
            return true;
        }
        let state = self.hash;
        if self.memo.failed(state) {
            return false;
        }
        let solved = match self.propagate().then(|| self.choose()).flatten() {
            Some(options) => {
                let mut solved = false;
                for &(y, o) in &options {
                    self.set(y as usize, o, true);
                    solved = self.solve();
                    if solved {
                        break;
                    }
                    self.set(y as usize, o, false);
                    if self.aborted {
                        break;
                    }
                }
                solved
            }
            None => false,
        };
        if !solved && !self.aborted {
            self.memo.record(state);
        }
        solved
    }

    /// The options (buffer, offset) of the choice point with the fewest, or `None` when one has
    /// none (a dead branch).
    fn choose(&self) -> Option<Vec<(u32, u64)>> {
        let mut best: Option<Vec<(u32, u64)>> = None;
        let mut options = Vec::new();
        for s in 0..self.sections {
            let mut at = 0usize;
            while let Some((g0, g1)) = self.free_range(s, at) {
                at = g1;
                for top in [false, true] {
                    let cap = best.as_ref().map_or(usize::MAX, Vec::len);
                    self.options(s, (g0, g1), top, cap, &mut options);
                    if options.is_empty() {
                        return None;
                    }
                    if options.len() < cap {
                        best = Some(std::mem::take(&mut options));
                    }
                }
                if best.as_ref().is_some_and(|b| b.len() == 1) {
                    return best;
                }
            }
        }
        best
    }

    /// The options of the bottom (or top) of the free range `[g0, g1)` (in units) of section `s`:
    /// unplaced buffers live there, one per class, that fit starting at `g0` (ending at `g1`)
    /// over their whole life, largest first. Stops after `cap` options.
    fn options(
        &self,
        s: usize,
        (g0, g1): (usize, usize),
        top: bool,
        cap: usize,
        out: &mut Vec<(u32, u64)>,
    ) {
        let p = self.p;
        out.clear();
        let len = ((g1 - g0) as u64) * self.unit;
        for &y in p.section_members(s + self.first as usize) {
            let yi = y as usize;
            let size = p.size[yi];
            if self.placed[yi] || size > len {
                continue;
            }
            let o = if top {
                g1 as u64 * self.unit - size
            } else {
                g0 as u64 * self.unit
            };
            if !o.is_multiple_of(p.align[yi])
                || out
                    .iter()
                    .any(|&(x, _)| self.class[x as usize] == self.class[yi])
                || !self.fits(yi, o)
            {
                continue;
            }
            out.push((y, o));
            if out.len() >= cap {
                return;
            }
        }
        match self.shuffle {
            0 => out.sort_unstable_by_key(|&(x, _)| (std::cmp::Reverse(p.size[x as usize]), x)),
            seed => out.sort_unstable_by_key(|&(x, o)| key(x ^ seed as u32, o ^ seed)),
        }
    }

    /// The first free range of section `s` (in units) at or above unit `from`.
    fn free_range(&self, s: usize, from: usize) -> Option<(usize, usize)> {
        let row = &self.grid[s * self.words..(s + 1) * self.words];
        let start = next_bit(row, from, false)?;
        let end = next_bit(row, start, true).unwrap_or(self.words * 64);
        Some((start, end))
    }

    /// Whether buffer `y` at byte offset `o` is clear of every placed buffer over its life.
    fn fits(&self, y: usize, o: u64) -> bool {
        let p = self.p;
        let (lo, hi) = (
            (o / self.unit) as usize,
            ((o + p.size[y]) / self.unit) as usize,
        );
        (p.first[y]..=p.last[y]).all(|s| {
            let s = (s - self.first) as usize;
            let row = &self.grid[s * self.words..(s + 1) * self.words];
            !any_set(row, lo, hi)
        })
    }

    /// Places (`on`) or removes buffer `y` at byte offset `o`.
    fn set(&mut self, y: usize, o: u64, on: bool) {
        let p = self.p;
        let (lo, hi) = (
            (o / self.unit) as usize,
            ((o + p.size[y]) / self.unit) as usize,
        );
        for s in p.first[y]..=p.last[y] {
            let s = (s - self.first) as usize;
            let row = &mut self.grid[s * self.words..(s + 1) * self.words];
            flip(row, lo, hi);
        }
        self.placed[y] = on;
        self.offset[y] = o;
        self.hash ^= key(self.class[y], o);
        if on {
            self.remaining -= 1;
        } else {
            self.remaining += 1;
        }
    }
}

#[cfg(test)]
mod tests;
