//! Instances with a known perfect packing, for tests and benchmarks.
//!
//! Cut the rectangle `[0, horizon) × [0, capacity)` (time × bytes) into pieces by random guillotine
//! cuts; each piece becomes a buffer whose bottom edge is a valid offset. Every time column stays
//! fully covered, so the max load equals `capacity` and a plan with peak = lower bound exists: the
//! zero-slack structure of MiniMalloc's "challenging" benchmarks, where greedy heuristics leave a
//! sliver somewhere and only an exact search is sure to succeed.

use super::Buffer;
use super::rng::Rng;

/// Cuts `[0, horizon) × [0, capacity)` into up to `count` buffers (fewer only when the rectangle
/// has fewer unit cells). Returns the buffers, in a seeded random order, and the witness offsets.
/// Equal arguments give equal instances. `capacity` and `horizon` below 1 are treated as 1.
pub fn perfect_packing(
    count: usize,
    capacity: u64,
    horizon: u64,
    seed: u64,
) -> (Vec<Buffer>, Vec<u64>) {
    let mut rng = Rng::new(seed);
    // Pieces as (t0, t1, o0, o1).
    let mut pieces = vec![(0u64, horizon.max(1), 0u64, capacity.max(1))];
    let mut stuck = 0;
    while pieces.len() < count.max(1) && stuck < 64 {
        let k = rng.below(pieces.len() as u64) as usize;
        let (t0, t1, o0, o1) = pieces[k];
        let (dt, dbytes) = (t1 - t0, o1 - o0);
        if dt < 2 && dbytes < 2 {
            stuck += 1;
            if pieces.iter().all(|p| p.1 - p.0 < 2 && p.3 - p.2 < 2) {
                break;
            }
            continue;
        }
        stuck = 0;
        // Cut across the longer side more often, relative to the rectangle's own proportions.
        let time_weight = dt as f64 / horizon.max(1) as f64;
        let byte_weight = dbytes as f64 / capacity.max(1) as f64;
        let pick_time = dbytes < 2
            || (dt >= 2
                && (rng.next_u64() as f64 / u64::MAX as f64) * (time_weight + byte_weight)
                    < time_weight);
        if pick_time {
            let at = t0 + 1 + rng.below(dt - 1);
            pieces[k] = (t0, at, o0, o1);
            pieces.push((at, t1, o0, o1));
        } else {
            let at = o0 + 1 + rng.below(dbytes - 1);
            pieces[k] = (t0, t1, o0, at);
            pieces.push((t0, t1, at, o1));
        }
    }
    // Shuffle so input order carries no hint of the witness.
    for i in (1..pieces.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        pieces.swap(i, j);
    }
    let buffers = pieces
        .iter()
        .map(|&(t0, t1, o0, o1)| Buffer::new(t0, t1, o1 - o0))
        .collect();
    let offsets = pieces.iter().map(|p| p.2).collect();
    (buffers, offsets)
}
