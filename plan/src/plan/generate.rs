//! Instances with a known perfect packing, for tests, benchmarks and the planner's sweep.
//!
//! Cut the rectangle `[0, horizon) × [0, capacity)` (time × bytes) into pieces; each piece becomes a
//! buffer whose bottom edge is a valid offset. Every time column stays fully covered, so the max
//! load equals `capacity` and a plan with peak = lower bound exists: the zero-slack structure of
//! MiniMalloc's "challenging" benchmarks, where greedy heuristics leave a sliver somewhere and only
//! an exact search is sure to succeed. The generator's offsets are returned as a witness.
//!
//! Families ([`PackingFamily`]):
//! - **Guillotine**: random cuts across time or bytes, the longer side more often.
//! - **Long and short**: the byte axis is cut into bands; some bands hold a few long-lived large
//!   buffers, the others are cut into many short small ones (weights that stay for the whole step
//!   next to activations that come and go).
//! - **Pinwheel**: guillotine cuts where some pieces are instead split into five around a centre,
//!   a non-guillotine arrangement greedy heuristics handle worst.

use super::Buffer;
use super::rng::Rng;

/// `count` buffers with random lifetimes and sizes, the shape of the large instances the planner's
/// time limits are measured on (no known optimum): each starts at a uniform time in `[0, count)`,
/// lives 1 to 10^4 steps and takes 64 B to 1 MiB + 63 B, so about 5,000 are live at a time
/// whatever the count. Equal counts and seeds give equal instances.
pub fn random_lifetimes(count: usize, seed: u64) -> Vec<Buffer> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let l = rng.below(count as u64);
            Buffer::new(l, l + 1 + rng.below(10_000), 64 + rng.below(1 << 20))
        })
        .collect()
}

/// The shape of a generated perfect packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackingFamily {
    /// Random guillotine cuts.
    Guillotine,
    /// Long-lived large buffers in some byte bands, short small ones in the others.
    LongAndShort,
    /// Guillotine cuts mixed with five-piece pinwheels.
    Pinwheel,
}

/// A perfect-packing instance description; equal descriptions give equal instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackingDesc {
    /// Number of buffers wanted (fewer only when the rectangle has fewer grid cells).
    pub count: usize,
    /// Height of the rectangle in bytes, rounded down to a multiple of `grid` (at least one grid
    /// step): the lower bound and the optimal peak of the instance.
    pub capacity: u64,
    /// Width of the rectangle in time steps (at least 1).
    pub horizon: u64,
    /// Byte granularity of cuts, so every size and witness offset is a multiple of it (at least 1).
    pub grid: u64,
    /// How the rectangle is cut.
    pub family: PackingFamily,
    /// Seed of the cuts and of the output order.
    pub seed: u64,
}

/// A piece in grid units: `[t0, t1) × [o0, o1)`.
type Piece = (u64, u64, u64, u64);

impl PackingDesc {
    /// Generates the instance: buffers in a seeded random order and the witness offsets.
    pub fn generate(&self) -> (Vec<Buffer>, Vec<u64>) {
        let grid = self.grid.max(1);
        let height = (self.capacity / grid).max(1);
        let horizon = self.horizon.max(1);
        let count = self.count.max(1);
        let mut rng = Rng::new(self.seed);
        let (mut pieces, frozen) = match self.family {
            PackingFamily::LongAndShort => bands(count, horizon, height, &mut rng),
            _ => (vec![(0, horizon, 0, height)], 0),
        };
        let pinwheels = self.family == PackingFamily::Pinwheel;
        cut(
            &mut pieces,
            frozen,
            count,
            horizon,
            height,
            pinwheels,
            &mut rng,
        );
        // Shuffle so input order carries no hint of the witness.
        for i in (1..pieces.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            pieces.swap(i, j);
        }
        let buffers = pieces
            .iter()
            .map(|&(t0, t1, o0, o1)| Buffer::new(t0, t1, (o1 - o0) * grid))
            .collect();
        let offsets = pieces.iter().map(|p| p.2 * grid).collect();
        (buffers, offsets)
    }
}

/// A guillotine perfect packing on a 1-byte grid: `[0, horizon) × [0, capacity)` cut into up to
/// `count` buffers. Returns the buffers (seeded random order) and the witness offsets.
pub fn perfect_packing(
    count: usize,
    capacity: u64,
    horizon: u64,
    seed: u64,
) -> (Vec<Buffer>, Vec<u64>) {
    PackingDesc {
        count,
        capacity,
        horizon,
        grid: 1,
        family: PackingFamily::Guillotine,
        seed,
    }
    .generate()
}

/// A random integer strictly inside `(lo, hi)`; requires `hi - lo >= 2`.
fn inside(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + 1 + rng.below(hi - lo - 1)
}

/// The long-and-short start: byte bands, about 40% of them cut into 1–3 long pieces, the rest
/// left whole for [`cut`]. Returns the pieces with the long ones first, and how many those are
/// (they are not cut further).
fn bands(count: usize, horizon: u64, height: u64, rng: &mut Rng) -> (Vec<Piece>, usize) {
    let wanted = (count / 12).clamp(2, 64) as u64;
    let mut edges = vec![0, height];
    for _ in 1..wanted.min(height) {
        edges.push(rng.below(height));
    }
    edges.sort_unstable();
    edges.dedup();
    let mut long = Vec::new();
    let mut fine = Vec::new();
    for w in edges.windows(2) {
        let (o0, o1) = (w[0], w[1]);
        if rng.below(10) < 4 && long.len() + 3 < count {
            let parts = 1 + rng.below(3);
            let mut t = 0;
            for k in 0..parts {
                let end = if k + 1 == parts || horizon - t < 2 {
                    horizon
                } else {
                    // Each long piece keeps at least a third of what is left of the horizon.
                    t + (horizon - t) / 3 + rng.below((horizon - t) / 3 + 1)
                };
                long.push((t, end.clamp(t + 1, horizon), o0, o1));
                t = end.clamp(t + 1, horizon);
                if t == horizon {
                    break;
                }
            }
        } else {
            fine.push((0, horizon, o0, o1));
        }
    }
    let frozen = long.len();
    if fine.is_empty() {
        // Every band came out long: let the cuts split them after all.
        return (long, 0);
    }
    long.extend(fine);
    (long, frozen)
}

/// Splits `pieces[frozen..]` until there are `count` pieces (or no piece can be split): a random
/// piece is cut across time or bytes, the longer side (relative to the rectangle) more often;
/// with `pinwheels`, one split in six instead makes a five-piece pinwheel when the piece allows.
fn cut(
    pieces: &mut Vec<Piece>,
    frozen: usize,
    count: usize,
    horizon: u64,
    height: u64,
    pinwheels: bool,
    rng: &mut Rng,
) {
    let mut stuck = 0;
    while pieces.len() < count && stuck < 64 && pieces.len() > frozen {
        let k = frozen + rng.below((pieces.len() - frozen) as u64) as usize;
        let (t0, t1, o0, o1) = pieces[k];
        let (dt, db) = (t1 - t0, o1 - o0);
        if dt < 2 && db < 2 {
            stuck += 1;
            if pieces[frozen..]
                .iter()
                .all(|p| p.1 - p.0 < 2 && p.3 - p.2 < 2)
            {
                break;
            }
            continue;
        }
        stuck = 0;
        if pinwheels && dt >= 3 && db >= 3 && pieces.len() + 4 <= count && rng.below(6) == 0 {
            let (ta, tb) = two_inside(rng, t0, t1);
            let (oa, ob) = two_inside(rng, o0, o1);
            pieces[k] = (ta, tb, oa, ob); // the centre
            pieces.push((t0, tb, o0, oa));
            pieces.push((tb, t1, o0, ob));
            pieces.push((ta, t1, ob, o1));
            pieces.push((t0, ta, oa, o1));
            continue;
        }
        let time_weight = dt as f64 / horizon as f64;
        let byte_weight = db as f64 / height as f64;
        let unit = rng.next_u64() as f64 / u64::MAX as f64;
        let pick_time = db < 2 || (dt >= 2 && unit * (time_weight + byte_weight) < time_weight);
        if pick_time {
            let at = inside(rng, t0, t1);
            pieces[k] = (t0, at, o0, o1);
            pieces.push((at, t1, o0, o1));
        } else {
            let at = inside(rng, o0, o1);
            pieces[k] = (t0, t1, o0, at);
            pieces.push((t0, t1, at, o1));
        }
    }
}

/// Two distinct random integers strictly inside `(lo, hi)`, ascending; requires `hi - lo >= 3`.
fn two_inside(rng: &mut Rng, lo: u64, hi: u64) -> (u64, u64) {
    let a = inside(rng, lo, hi - 1);
    let b = inside(rng, a, hi);
    (a, b)
}

#[cfg(test)]
mod tests;
