//! Liveness analysis and static memory planning (Dynamic Storage Allocation).
//!
//! A [`Buffer`] lives during the half-open time interval `[lower, upper)` and needs `size` bytes at an
//! offset that is a multiple of `align`. A [`Plan`] gives every buffer an offset so that buffers whose
//! lifetimes intersect never overlap in space; its `peak` is `max(offset + size)`. Minimising the peak
//! is NP-complete, so this module offers, from cheap to expensive:
//!
//! - [`lower_bound`]: the maximum live load over time. No plan beats it; a plan that meets it is optimal.
//! - [`greedy_by_size`]: the TFLite / XNNPACK baseline (largest first, best-fitting gap among the
//!   time-overlapping placed buffers, the gap below the lowest one included). Every result is compared
//!   with it; [`greedy_by_size_with`] also runs its lowest-fit twin.
//! - [`solve`]: a parallel portfolio of exact MiniMalloc-style provers and heuristic workers
//!   (XLA's orders, section pressure, sweep-line good fit, squeezes, randomised reorder) in
//!   lockstep epochs. Given a capacity it decides feasibility first (a plan, or a proof with its
//!   reason); it lowers the peak toward the lower bound until time runs out or it proves optimal.
//! - [`PackingDesc`]: perfect packings (optimum known) in three families, for tests and sweeps.
//! - [`verify`]: an O(n log n) sweep that checks any plan (overlaps, alignment, capacity, peak).
//!   Every plan [`solve`] returns has passed it.
//! - [`liveness`]: op lists to buffers, with in-place reuse.
//! - [`parse_csv`] / [`write_csv`]: MiniMalloc's `id,lower,upper,size[,alignment][,offset]` format.
//! - [`recording`]: record an allocation sequence once, plan it, serve repeats in O(1) per allocation.
//!
//! Design:
//! - Half-open lifetimes (MiniMalloc's convention); TFLite's `[first, last]` is `upper = last + 1`.
//! - Offsets and sizes are `u64` bytes. An input is refused ([`Error::PlanTooLarge`]) only when
//!   the buffers of one time-connected group, stacked with alignment padding, could pass
//!   `u64::MAX`; groups never alive together count apart, and no planner can overflow.
//! - Heuristics never enumerate conflicting pairs (quadratic on large traces): an occupancy tree
//!   over compressed time yields the free gaps among a buffer's placed conflicts. The exact
//!   search keeps a flat conflict list and per-buffer arrays with undo logs, never copying state.
//! - Deterministic: seeded randomness, results exchanged only at epoch boundaries, in worker
//!   order. The time limit is a promise: every phase checks the deadline; only the first plan
//!   (sweep-line good fit, O(n) after the sort) always completes.
//!
//! Limits: the exact search is exponential in the worst case and runs only on instances of at
//! most [`EXACT_MAX_BUFFERS`] buffers. Alignment padding loosens the lower bound.
//!
//! Sources: Moffitt, "MiniMalloc", ASPLOS 2023; Pisarchyk & Lee, "Efficient Memory Management for
//! Deep Neural Net Inference" (2020); XLA's `GlobalDecreasingSizeBestFitHeap`; Lamprakos et al.,
//! "Futureproof Static Memory Planning" (idealloc), arXiv 2504.04874.
#![forbid(unsafe_code)]

mod bound;
mod csv;
mod descent;
mod events;
mod exact;
mod first;
mod freelist;
mod generate;
mod greedy;
mod heuristics;
mod index;
mod liveness;
mod occupancy;
mod portfolio;
pub mod recording;

mod rng;
mod solve;
mod sweep;
mod verify;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;

pub use bound::lower_bound;

pub use csv::{CsvInstance, parse_csv, write_csv};
pub use generate::{PackingDesc, PackingFamily, perfect_packing, random_lifetimes};
pub use greedy::{Fit, greedy_by_size, greedy_by_size_with};
pub use liveness::{Liveness, OpUses, TensorRole, liveness};
pub use solve::{
    EXACT_MAX_BUFFERS, MAX_THREADS, Progress, ProgressFn, Solution, SolveOptions, Stages,
    portfolio_threads, solve,
};
pub use verify::verify;

use crate::{ArgumentError, Error, Result};
use events::Events;

/// One buffer to place: live during the half-open time interval `[lower, upper)`, `size` bytes,
/// at an offset that is a multiple of `align`.
///
/// Two buffers conflict when `a.lower < b.upper && b.lower < a.upper`; conflicting buffers must not
/// overlap in space. Valid buffers have `lower < upper`, `size >= 1` and `align` a power of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// First time step at which the buffer is live.
    pub lower: u64,
    /// First time step at which the buffer is dead (exclusive end).
    pub upper: u64,
    /// Size in bytes.
    pub size: u64,
    /// Required offset alignment in bytes, a power of two (1 = none).
    pub align: u64,
}

impl Buffer {
    /// A buffer with alignment 1.
    pub fn new(lower: u64, upper: u64, size: u64) -> Self {
        Buffer {
            lower,
            upper,
            size,
            align: 1,
        }
    }

    /// Buffers with alignment 1 from `(lower, upper, size)` triples: the tests' instances.
    #[cfg(test)]
    pub(crate) fn list(triples: &[(u64, u64, u64)]) -> Vec<Buffer> {
        triples
            .iter()
            .map(|&(lower, upper, size)| Buffer::new(lower, upper, size))
            .collect()
    }

    /// Whether the two lifetimes intersect (then the buffers must not share bytes).
    pub fn conflicts(&self, other: &Buffer) -> bool {
        self.lower < other.upper && other.lower < self.upper
    }
}

/// A placement: `offsets[i]` is the offset in bytes of `buffers[i]`; `peak = max(offset + size)`
/// (0 for no buffers) is the arena size the plan needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Offset in bytes of each buffer, in input order.
    pub offsets: Vec<u64>,
    /// Arena size in bytes: the largest `offset + size`.
    pub peak: u64,
}

impl Plan {
    /// Builds a plan from offsets, computing the peak. Sizes come from `buffers` (same length).
    pub fn from_offsets(buffers: &[Buffer], offsets: Vec<u64>) -> Plan {
        let peak = buffers
            .iter()
            .zip(&offsets)
            .map(|(b, &o)| o.saturating_add(b.size))
            .max()
            .unwrap_or(0);
        Plan { offsets, peak }
    }
}

/// Rounds `x` up to a multiple of `align` (a power of two). Callers guarantee no overflow
/// ([`validate`] bounds every reachable offset).
#[inline]
pub(crate) fn align_up(x: u64, align: u64) -> u64 {
    crate::align::align_up(x, align).unwrap_or(u64::MAX)
}

/// The largest stacked total (sizes plus alignment padding) of one time-connected group of
/// buffers that the planners accept: all of `u64`. Every planner here puts a buffer at 0 or at its
/// alignment above the top of a conflict placed before it, so along any chain of such placements
/// `offset + size` is at most the chain's padded total, which this bounds; no sum or `align_up` in
/// the planners can then overflow.
pub const PLAN_OFFSET_LIMIT: u64 = u64::MAX;

/// Checks that every buffer is valid and that no plan can overflow: every planner here places a
/// buffer at 0 or at the aligned top of a conflicting one, so an offset is at most the padded total
/// `sum(size + align - 1)` of its time-connected group (groups never overlap in time, so the peak
/// is the maximum over groups, not the sum). Returns the sorted lifetime endpoints (sorted on
/// `threads` threads), which every later sweep reuses, and the largest padded total of one group.
///
/// # Errors
/// [`ArgumentError::Invalid`] naming the buffer for `lower >= upper`, [`ArgumentError::Zero`] for a
/// zero size, [`ArgumentError::TooMany`] for 2^31 buffers or more, [`Error::InvalidAlignment`] for
/// an alignment that is not a power of two, [`Error::PlanTooLarge`] when one group's padded total
/// exceeds [`PLAN_OFFSET_LIMIT`].
pub(crate) fn validate(buffers: &[Buffer], threads: usize) -> Result<(Events, u128)> {
    check_buffers(buffers, &|i| i.to_string())?;
    if buffers.len() > MAX_BUFFERS {
        return Err(ArgumentError::too_many(
            "buffers (the planner's limit)",
            buffers.len() as u64,
            MAX_BUFFERS as u64,
        )
        .into());
    }
    let events = Events::on(buffers, threads);
    let (padded_total, count) = events.worst_group();
    if padded_total > PLAN_OFFSET_LIMIT as u128 {
        return Err(Error::PlanTooLarge {
            buffers: count,
            padded_total,
            limit: PLAN_OFFSET_LIMIT,
        });
    }
    Ok((events, padded_total))
}

/// Most buffers one instance may have: ids are `u32` with one bit kept for event tags.
pub const MAX_BUFFERS: usize = (1 << 31) - 1;

/// Checks each buffer on its own: a non-empty lifetime, a size of at least 1 byte, a power-of-two
/// alignment of at most 2^62.
///
/// # Errors
/// [`ArgumentError::Invalid`] or [`ArgumentError::Zero`] naming buffer `i` as `name(i)`, or
/// [`Error::InvalidAlignment`].
pub(crate) fn check_buffers(buffers: &[Buffer], name: &dyn Fn(usize) -> String) -> Result<()> {
    for (i, b) in buffers.iter().enumerate() {
        if b.lower >= b.upper {
            return Err(ArgumentError::invalid_value(
                format!("lifetime of buffer {}", name(i)),
                format!("[{}, {})", b.lower, b.upper),
                "a non-empty lifetime (lower below upper)",
            )
            .into());
        }
        if b.size == 0 {
            return Err(ArgumentError::zero(format!("size of buffer {}", name(i))).into());
        }
        if !b.align.is_power_of_two() || b.align > 1 << 62 {
            return Err(Error::InvalidAlignment {
                align: b.align,
                max: 1 << 62,
            });
        }
    }
    Ok(())
}
