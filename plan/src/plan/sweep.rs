//! The first plan of [`super::solve`]: XLA's fast pass, an online good-fit allocator simulated in
//! time order (a TLSF, [`FreeList`]: O(1) per operation), so the whole sweep is O(n) after the sort.
//!
//! It must hold the time limit at every scale, so the caller may cut it between chunks of
//! endpoints. The answer is then its best so far: the buffers it placed stay where it placed them,
//! and the rest go above the arena's top at the cut (nothing placed and still live reaches higher),
//! in size-class slabs (one free list of slots per power of two, O(1) per operation without
//! searching or merging, about the cost of stacking them). A slab reuses the slots of buffers that
//! died, so the rest costs about one and a half times their live load (sizes rounded up to powers
//! of two), not their sum: stacking every unplaced buffer gave 24–188 times the lower bound on
//! random instances of 2·10^5 to 10^6 buffers cut under load.
//!
//! Every chunk of endpoints the good fit places, with their offsets, is handed to the caller (the
//! verifier, see [`super::first`]) as soon as it is placed. The rest is checked as it is placed,
//! against the slot each buffer went to ([`SlotCheck`]: O(1) per endpoint, where the general
//! verifier's ordered set of live buffers cost more than the slabs themselves at a million), on a
//! second thread beside the placing where the caller has one ([`rest`]).

use super::events::{Event, Events};
use super::freelist::FreeList;
use super::verify::{Fault, GATHER, Placed, SlotCheck};
use super::{Buffer, Plan};
use rest::{AtCut, Rest, place_rest};

/// Offset marker for a buffer not placed yet.
const UNPLACED: u64 = u64::MAX;

/// What the sweep produced.
#[derive(Debug)]
pub(crate) struct Sweep {
    pub plan: Plan,
    /// Endpoints the good-fit sweep placed before it was cut (all of them when it was not).
    pub swept: usize,
    /// Whether the rest went to slabs (false: stacked, for groups whose slabs could overflow).
    pub slabs: bool,
    /// After a cut, what checking the rest left to the caller.
    pub rest: Option<Rested>,
}

/// The rest of a cut sweep, checked in its slots ([`SlotCheck`]) as it was placed; the buffers
/// placed before the cut must end at or below `base` for the whole plan to be valid.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rested {
    /// The arena's top at the cut, where the first group's slots start.
    pub base: u64,
    /// The largest end of a buffer in the rest.
    pub peak: u64,
}

impl Sweep {
    /// Whether the sweep ran to the end.
    pub fn finished(&self) -> bool {
        self.swept == self.plan.offsets.len() * 2
    }

    /// The algorithm, for [`super::Solution::algorithm`].
    pub fn describe(&self) -> String {
        if self.finished() {
            return "sweep-line good fit".into();
        }
        let share = self.swept as f64 / (self.plan.offsets.len() * 2) as f64 * 100.0;
        let rest = if self.slabs {
            "size-class slabs"
        } else {
            "a stack"
        };
        format!("sweep-line good fit, cut at {share:.0}% of the endpoints, the rest in {rest}")
    }
}

/// What the sweep reports to, and asks of, its caller.
pub(crate) trait Watch {
    /// Whether to cut the sweep now, `done` endpoints in.
    fn cut(&mut self, done: usize) -> bool;
    /// The next endpoints in time order, with their offsets.
    fn placed(&mut self, chunk: &[Placed]);
    /// Whether a second core is free to check the rest after a cut beside its placing.
    fn beside(&self) -> bool;
}

/// Runs the sweep, asking `watch` before each chunk of endpoints whether to stop and complete
/// the plan as the module docs describe, and handing it every chunk placed before that.
///
/// # Errors
/// The [`Fault`] the check of the rest found: a bug in the slabs, never hidden.
/// `padded_worst` is the largest padded total of one time-connected group (see
/// [`super::validate`]): it tells whether slabs could overflow `u64`.
pub(crate) fn sweep_best_fit(
    buffers: &[Buffer],
    events: &Events,
    padded_worst: u128,
    watch: &mut dyn Watch,
) -> Result<Sweep, Fault> {
    let mut arena = FreeList::new();
    let mut offsets = vec![UNPLACED; buffers.len()];
    // By allocation rank (see `Event::opened`): the offset and the arena's handle before the cut,
    // the slot's length and number after it (see `AtCut`).
    let mut slots: Vec<(u64, u32)> = Vec::with_capacity(buffers.len());
    let (mut peak, mut live, mut done) = (0u64, 0usize, 0usize);
    let mut chunk: Vec<Placed> = Vec::with_capacity(GATHER);
    let mut endpoints = events.iter();
    loop {
        if watch.cut(done) {
            break;
        }
        next_chunk(&mut chunk, &mut endpoints);
        if chunk.is_empty() {
            return Ok(Sweep {
                plan: Plan { offsets, peak },
                swept: done,
                slabs: false,
                rest: None,
            });
        }
        for p in &mut chunk {
            let e = p.event;
            if e.alloc {
                let (offset, handle) = arena.alloc(e.size, e.align);
                offsets[e.id as usize] = offset;
                slots.push((offset, handle));
                p.offset = offset;
                peak = peak.max(offset + e.size);
                live += 1;
            } else {
                let (offset, handle) = slots[e.opened as usize];
                arena.free(handle);
                p.offset = offset;
                live -= 1;
            }
        }
        done += chunk.len();
        watch.placed(&chunk);
    }
    // Slabs never pass `u64::MAX` below this bound: a slot is at most twice the padded size and
    // its start at most a slot above the slab top, and the arena's top is within the group's
    // padded total (see `Rest`).
    let slabs = padded_worst <= (u64::MAX / 5) as u128;
    let base = arena.top();
    drop(arena);
    let at = AtCut {
        cut: slots.len(),
        slots: &mut slots,
        live,
        peak,
    };
    let check = SlotCheck::new(base, live);
    let rest = Rest::new(slabs, base);
    let (peak, check) = place_rest(events, done, rest, at, &mut offsets, check, watch.beside())?;
    Ok(Sweep {
        plan: Plan { offsets, peak },
        swept: done,
        slabs,
        rest: Some(Rested {
            base,
            peak: check.peak(),
        }),
    })
}

/// Fills `chunk` with the next endpoints, not placed yet.
fn next_chunk(chunk: &mut Vec<Placed>, endpoints: &mut impl Iterator<Item = Event>) {
    chunk.clear();
    chunk.extend(endpoints.take(GATHER).map(|event| Placed {
        event,
        offset: UNPLACED,
    }));
}

mod rest;
#[cfg(test)]
pub(crate) mod tests;
