//! Peak descent: a local search that starts from a finished plan (not from a buffer order) and
//! closes the holes at the fullest step.
//!
//! When one step of an instance is much fuller than the others (PanGu-2.6B: one step at the lower
//! bound, every other one at most 97.5% of it), a plan is above the bound by the holes in that
//! step's stack, and the order heuristics keep such a hole however they are perturbed.
//!
//! The walk re-places buffers in a *stack-then-compact* order built from a plan: first the buffers
//! live at the fullest step `t*`, in the plan's offset order (they all conflict, so lowest fit
//! stacks them without a hole: the stack at `t*` is exactly the lower bound), then every other
//! buffer in the plan's offset order at the lowest fit (a compaction: it reproduces most of the
//! plan). The peak then comes from a buffer that no longer finds room below it, typically a
//! short-lived one next to `t*` whose space the stack now occupies. As in the order search, the
//! buffer that breaks the cutoff (one byte below the best peak) moves earlier among the compacted
//! ones, where it claims room before its neighbours; the moves accumulate until a plan passes
//! the cutoff, which becomes the new best and the cutoff drops again.

use crate::time::Instant;

use super::Buffer;
use super::events::Events;
use super::occupancy::{Fit, Occupancy};
use super::rng::Rng;

/// Failed rounds after which the order is rebuilt from the best plan (the accumulated moves are
/// dropped).
const RESTART_ROUNDS: u32 = 64;

/// Peak-descent state for one instance; see the module docs.
pub(crate) struct Descent<'a> {
    buffers: &'a [Buffer],
    placed: Occupancy,
    /// A time at which the live load is the largest (the lower bound).
    fullest: u64,
    /// The walk's best plan and its peak.
    best: Vec<u64>,
    peak: u64,
    /// The order being tried: the stack at `fullest` (its first `stack` entries), then the rest.
    order: Vec<u32>,
    stack: usize,
    /// Rounds since the last improvement or rebuild.
    failed: u32,
    /// The stack order of the best plan cannot pass the cutoff (see [`Self::stuck`]).
    stuck: bool,
    rng: Rng,
    offsets: Vec<u64>,
    /// Buffers placed by all rounds so far (the work done, for the portfolio's budgets).
    placements: u64,
}

impl<'a> Descent<'a> {
    /// Starts from the valid plan `offsets` (peak `peak`) of the buffers whose sorted endpoints are
    /// `events`; `fullest` is a time at which their live load is the largest.
    pub fn new(
        buffers: &'a [Buffer],
        events: &Events,
        fullest: u64,
        offsets: &[u64],
        peak: u64,
        seed: u64,
    ) -> Self {
        let mut walk = Descent {
            buffers,
            placed: Occupancy::new(events, buffers.len()),
            fullest,
            best: offsets.to_vec(),
            peak,
            order: Vec::with_capacity(buffers.len()),
            stack: 0,
            failed: 0,
            stuck: false,
            rng: Rng::new(seed),
            offsets: vec![0; buffers.len()],
            placements: 0,
        };
        walk.rebuild();
        walk
    }

    /// Whether the walk has stopped: the stack of its best plan leaves no room below the best
    /// peak for the buffer that breaks the cutoff even when it is placed right after the stack.
    /// A lower plan from [`Self::rebase`] restarts it.
    pub fn stuck(&self) -> bool {
        self.stuck
    }

    /// Buffers placed by all rounds so far.
    pub fn placements(&self) -> u64 {
        self.placements
    }

    /// Continues from `offsets` (peak `peak`) when it is lower than the walk's best.
    pub fn rebase(&mut self, offsets: &[u64], peak: u64) {
        if peak < self.peak {
            self.best.copy_from_slice(offsets);
            self.peak = peak;
            self.rebuild();
        }
    }

    /// One squeeze of the current order with the best peak minus one as cutoff. Returns the new
    /// plan and its peak when it passed; otherwise moves the buffer that broke the cutoff earlier
    /// for the next round. `None` also when `deadline` passed.
    pub fn round(&mut self, deadline: Instant) -> Option<(Vec<u64>, u64)> {
        if self.failed >= RESTART_ROUNDS {
            self.rebuild();
        }
        match self.squeeze(deadline) {
            Ok(peak) => {
                self.best.copy_from_slice(&self.offsets);
                self.peak = peak;
                self.failed = 0;
                Some((self.best.clone(), peak))
            }
            Err(Some(k)) => {
                self.failed += 1;
                if k > self.stack {
                    // To the front of the compacted part half of the time (squeaky wheel),
                    // else anywhere before `k` (breaks cycles between two such buffers).
                    let to = if self.rng.below(2) == 0 {
                        self.stack
                    } else {
                        self.stack + self.rng.below((k - self.stack) as u64) as usize
                    };
                    let x = self.order.remove(k);
                    self.order.insert(to, x);
                } else {
                    // The stack, or the first buffer after it, breaks the cutoff: no move helps
                    // until a better plan arrives.
                    self.stuck = true;
                }
                None
            }
            Err(None) => None,
        }
    }

    /// The stack-then-compact order of the best plan.
    fn rebuild(&mut self) {
        let (b, t, best) = (self.buffers, self.fullest, &self.best);
        let live = |i: u32| b[i as usize].lower <= t && t < b[i as usize].upper;
        self.order.clear();
        self.order.extend(0..b.len() as u32);
        self.order
            .sort_unstable_by_key(|&i| (!live(i), best[i as usize], i));
        self.stack = self.order.partition_point(|&i| live(i));
        self.failed = 0;
        self.stuck = false;
    }

    /// Places the order at the lowest fit into `offsets`. Returns the peak, or `Err(Some(k))` when
    /// `order[k]` would end at or above the best peak, `Err(None)` when the deadline passed.
    fn squeeze(&mut self, deadline: Instant) -> Result<u64, Option<usize>> {
        let b = self.buffers;
        self.placed.clear();
        let mut peak = 0u64;
        for (k, &i) in self.order.iter().enumerate() {
            if k % 256 == 255 && Instant::now() >= deadline {
                return Err(None);
            }
            let i = i as usize;
            self.placements += 1;
            let offset = self.placed.choose(i, b[i].size, b[i].align, Fit::Lowest);
            let end = offset + b[i].size;
            if end >= self.peak {
                return Err(Some(k));
            }
            peak = peak.max(end);
            self.offsets[i] = offset;
            self.placed.insert(i, offset, end);
        }
        Ok(peak)
    }
}

#[cfg(test)]
mod tests;
