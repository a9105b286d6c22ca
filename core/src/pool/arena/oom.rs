//! The out-of-memory explainer: what an [`Error::OutOfMemory`](crate::Error::OutOfMemory) from the
//! arena pool reports, computed from the pool's state at the moment of failure (copied under the
//! lock) and the planner's verdict (computed after the lock is released).
//!
//! - `largest_live`: the five largest live allocations.
//! - `fragmentation`: 1 − largest free range / total free, over all blocks.
//! - `trim_would_help`: blocks that hold nothing but frees waiting for in-flight work (truly empty
//!   ones were already trimmed on the way here) would, once that work completes and they are
//!   returned, make room: under the budget for the request's block, or, with no budget (the driver
//!   refused), at least the request's bytes given back to the driver.
//! - `static_plan_would_fit`: whether the live set plus the request, all alive at once, packs into
//!   one arena of the capacity (the budget; with no budget, the bytes the pool already holds, which
//!   the driver did grant). Decided by the static planner ([`crate::plan::solve`] in its decision
//!   form, 20 ms); with more than [`PLAN_MAX_BUFFERS`] live allocations, by bounds only (the sum of
//!   sizes is a lower bound; contiguous packing at the aligned sizes is a plan). `None` when
//!   undecided. `Some(true)` means the failure is fragmentation: planning the workload avoids it.

use std::time::Duration;

use super::carved::{Carved, Kind, State};
use crate::OomReport;
use crate::align::align_up;
use crate::plan::{self, Buffer, SolveOptions};

/// Above this many live allocations the explainer uses bounds instead of the planner.
pub const PLAN_MAX_BUFFERS: usize = 2048;

/// What the explainer needs, copied out under a pool's lock so that the planner (up to 20 ms)
/// runs after the lock is released; the snapshots of an arena pool's bottom pools merge into
/// one ([`OomSnapshot::merge`]).
pub(super) struct OomSnapshot {
    /// The report, but for the fields [`OomSnapshot::explain`] derives.
    report: OomReport,
    /// Free bytes in the blocks.
    free: u64,
    /// Committed bytes of blocks that hold nothing but pending frees.
    reclaimable: u64,
    /// Bytes charged to the budget, by every pool on it.
    charged: u64,
    /// Live allocation sizes.
    sizes: Vec<u64>,
    /// The request, rounded.
    need: u64,
    align: u64,
}

impl OomSnapshot {
    /// One snapshot of two pools' that failed the same request.
    pub(super) fn merge(mut self, other: OomSnapshot) -> OomSnapshot {
        let (r, o) = (&mut self.report, other.report);
        r.reserved += o.reserved;
        r.in_use += o.in_use;
        r.largest_free = r.largest_free.max(o.largest_free);
        r.pending_free += o.pending_free;
        r.largest_live.extend(o.largest_live);
        r.largest_live.sort_by_key(|l| std::cmp::Reverse(l.1));
        r.largest_live.truncate(5);
        self.free += other.free;
        self.reclaimable += other.reclaimable;
        self.charged = self.charged.max(other.charged);
        self.sizes.extend(other.sizes);
        self
    }

    /// The report, with `static_plan_would_fit` decided by the planner. Call without the lock.
    pub(super) fn explain(mut self) -> OomReport {
        let r = &mut self.report;
        r.fragmentation = if self.free == 0 {
            0.0
        } else {
            1.0 - r.largest_free as f64 / self.free as f64
        };
        // With a budget shared by several pools, what the others hold counts against it too.
        let charged = self.charged.max(r.reserved);
        r.trim_would_help = self.reclaimable > 0
            && match r.budget {
                Some(b) => charged - self.reclaimable + self.need <= b,
                None => self.reclaimable >= self.need,
            };
        let capacity = r.budget.unwrap_or(r.reserved);
        self.sizes.push(self.need);
        r.static_plan_would_fit = static_plan_fits(&self.sizes, self.align, capacity);
        self.report
    }
}

impl<K: Kind> Carved<K> {
    /// The state of a failed request of `requested` bytes (`need` after rounding, at `align`).
    pub(super) fn oom_snapshot(
        &self,
        st: &State<K>,
        requested: u64,
        need: u64,
        align: u64,
        label: &str,
    ) -> OomSnapshot {
        let mut free = 0u64;
        let mut largest = 0u64;
        // Bytes per block index still held by pending frees.
        let mut pending = vec![0u64; st.blocks.len()];
        for (size, (block, _, _)) in st.deferred.iter() {
            if let Some(p) = pending.get_mut(*block) {
                *p += size;
            }
        }
        let mut reclaimable = 0u64;
        for (i, b) in st.blocks.iter().enumerate() {
            let Some(b) = b else { continue };
            let r = b.carving.report();
            free += r.free;
            largest = largest.max(r.largest_free);
            if r.used <= pending[i] {
                reclaimable += b.committed();
            }
        }
        let mut live: Vec<(String, u64)> = st
            .slots
            .iter()
            .map(|l| (l.label.clone(), l.region.size))
            .collect();
        live.sort_by_key(|l| std::cmp::Reverse(l.1));
        live.truncate(5);
        OomSnapshot {
            report: OomReport {
                pool: self.config.name.clone(),
                label: (!label.is_empty()).then(|| label.to_string()),
                requested,
                reserved: st.stats.reserved,
                in_use: st.stats.in_use,
                largest_free: largest,
                fragmentation: 0.0,
                budget: self.budget.limit(),
                pending_free: st.deferred.bytes(),
                largest_live: live,
                trim_would_help: false,
                static_plan_would_fit: None,
            },
            free,
            reclaimable,
            charged: self.budget.reserved(),
            sizes: st.slots.iter().map(|l| l.region.size).collect(),
            need,
            align: align.max(self.base_align),
        }
    }
}

/// Whether buffers of `sizes` bytes, all alive at once, each at a multiple of `align`, fit in one
/// arena of `capacity` bytes. `None` when undecided.
pub(crate) fn static_plan_fits(sizes: &[u64], align: u64, capacity: u64) -> Option<bool> {
    let sum = sizes.iter().fold(0u64, |a, &s| a.saturating_add(s));
    if sum > capacity {
        return Some(false); // the lower bound alone exceeds it
    }
    let packed = sizes.iter().fold(0u64, |a, &s| {
        align_up(a, align).unwrap_or(u64::MAX).saturating_add(s)
    });
    if packed <= capacity {
        return Some(true); // contiguous packing is a plan
    }
    if sizes.len() > PLAN_MAX_BUFFERS {
        return None;
    }
    let buffers: Vec<Buffer> = sizes
        .iter()
        .map(|&size| Buffer {
            lower: 0,
            upper: 1,
            size,
            align,
        })
        .collect();
    let solution = plan::solve(
        &buffers,
        &SolveOptions {
            time_limit: Duration::from_millis(20),
            capacity: Some(capacity),
            ..SolveOptions::default()
        },
    )
    .ok()?;
    debug_assert!(solution.lower_bound == sum);
    solution.feasible
}

#[cfg(test)]
mod tests;
