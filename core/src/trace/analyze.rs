//! Inefficiency analysis of a trace: where memory was held without being needed, and how many
//! bytes of *peak* memory fixing each case would save.
//!
//! Time is measured in event steps (the index of an event in the trace): the peak of a pool is the
//! largest sum of live allocation sizes after any event, where an allocation is live from its
//! `Alloc` event up to (not including) its `FreeRequested` event. A fix is modelled as removing
//! `d` bytes of the allocation's footprint over some step ranges (a shorter lifetime, or a smaller
//! size); its saving is the pool's peak minus the peak with that change. A segment tree over the
//! per-step load answers each such question in O(k log n) for k ranges, so the whole analysis is
//! O(n log n) in the number of events.
//!
//! Findings (see [`FindingKind`]): early allocation, late deallocation, unused allocation, leak,
//! temporary idleness, dead write, overallocation. A virtual allocation's container (the activation
//! arena) takes its children's uses as its own and is checked only for early/late/unused/leak.
//! Copies an offloading model makes ([`super::TransferKind`]: prefetch, swap out, swap in) are uses
//! of the allocations they read and write; a spilled allocation is out of its pool's load from its
//! spill to its restore, and a gap between uses that it spent spilled is not reported as idle.

use std::collections::HashMap;

use super::{Access, Trace};

/// Thresholds of [`analyze`].
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// Report early allocation, late deallocation and idleness whose fix saves no peak bytes only
    /// when the wasted interval lasts at least this long, in ns. Default 1 ms. (Findings that save
    /// peak bytes are always reported.)
    pub min_gap_ns: u64,
    /// Report overallocation only when the allocation exceeds the largest use by more than this
    /// many bytes (absorbs rounding to the copy alignment). Default 16.
    pub overallocation_slack: u64,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            min_gap_ns: 1_000_000,
            overallocation_slack: 16,
        }
    }
}

/// The kind of waste a [`Finding`] reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingKind {
    /// Allocated well before its first use.
    EarlyAllocation,
    /// Freed well after its last use.
    LateDeallocation,
    /// Allocated and never used.
    UnusedAllocation,
    /// Never freed.
    Leak,
    /// A long gap between two consecutive uses (the bytes could be released or offloaded).
    TemporaryIdleness,
    /// Written twice with no read in between: the first write was wasted.
    DeadWrite,
    /// Larger than the most bytes any use touched.
    Overallocation,
}

impl FindingKind {
    /// Short name for reports (`"early allocation"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::EarlyAllocation => "early allocation",
            FindingKind::LateDeallocation => "late deallocation",
            FindingKind::UnusedAllocation => "unused allocation",
            FindingKind::Leak => "leak",
            FindingKind::TemporaryIdleness => "temporary idleness",
            FindingKind::DeadWrite => "dead write",
            FindingKind::Overallocation => "overallocation",
        }
    }
}

/// One inefficiency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// Trace id of the allocation.
    pub id: u64,
    /// Its label.
    pub label: String,
    /// Its pool.
    pub pool: String,
    /// Its size in bytes.
    pub size: u64,
    /// Bytes of the pool's peak the fix would save (0 when the waste is not at the peak).
    pub saved: u64,
    /// Bytes held without need over the wasted interval (the allocation's size, or the unused
    /// part for overallocation).
    pub wasted: u64,
    /// Event steps `[from, to)` of the wasted interval.
    pub steps: (usize, usize),
    /// Duration of the wasted interval, ns.
    pub duration_ns: u64,
    /// One line of explanation.
    pub detail: String,
    /// Where the allocation was made, when the trace has backtraces.
    pub backtrace: Option<String>,
}

/// Max segment tree over a per-step load. Loads are `u128`: the sum of live sizes can exceed
/// `u64` (a trace may hold several allocations near 2⁶³ bytes), and a wrapped sum would hide
/// the peak.
struct MaxTree {
    n: usize,
    t: Vec<u128>,
}

impl MaxTree {
    fn new(load: &[u128]) -> Self {
        let n = load.len();
        let mut t = vec![0; 2 * n];
        t[n..].copy_from_slice(load);
        for i in (1..n).rev() {
            t[i] = t[2 * i].max(t[2 * i + 1]);
        }
        MaxTree { n, t }
    }

    /// Max over `[lo, hi)`, 0 when empty.
    fn max(&self, lo: usize, hi: usize) -> u128 {
        let (mut l, mut r) = (lo.min(self.n) + self.n, hi.min(self.n) + self.n);
        let mut m = 0;
        while l < r {
            if l & 1 == 1 {
                m = m.max(self.t[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                m = m.max(self.t[r]);
            }
            l /= 2;
            r /= 2;
        }
        m
    }

    /// The peak after removing `d` bytes over each of the sorted, disjoint `ranges`.
    fn peak_without(&self, ranges: &[(usize, usize)], d: u64) -> u128 {
        let mut best = 0;
        let mut prev = 0;
        for &(lo, hi) in ranges {
            debug_assert!(prev <= lo && lo <= hi);
            best = best.max(self.max(prev, lo));
            if lo < hi {
                best = best.max(self.max(lo, hi).saturating_sub(u128::from(d)));
            }
            prev = hi;
        }
        best.max(self.max(prev, self.n))
    }
}

struct PoolLoad {
    tree: MaxTree,
    peak: u128,
}

/// Finds every inefficiency in `trace`, largest peak saving first (then by kind and id).
///
/// Complexity: O(n log n) in the number of events.
pub fn analyze(trace: &Trace, options: &AnalyzeOptions) -> Vec<Finding> {
    let n = trace.events.len();
    let mut lifetimes = trace.lifetimes();
    // Containers take their children's uses.
    let mut child_uses: HashMap<u64, Vec<(usize, Access, u64)>> = HashMap::new();
    for l in &lifetimes {
        if let Some(p) = l.parent {
            child_uses
                .entry(p)
                .or_default()
                .extend(l.uses.iter().copied());
        }
    }
    for l in &mut lifetimes {
        if let Some(extra) = child_uses.remove(&l.id) {
            l.uses.extend(extra);
            l.uses.sort_by_key(|u| u.0);
        }
    }
    let parents: std::collections::HashSet<u64> =
        lifetimes.iter().filter_map(|l| l.parent).collect();
    let containers: Vec<bool> = lifetimes.iter().map(|l| parents.contains(&l.id)).collect();

    // Per-pool load per step.
    let mut diffs: HashMap<&str, Vec<i128>> = HashMap::new();
    for l in &lifetimes {
        let d = diffs
            .entry(l.pool.as_str())
            .or_insert_with(|| vec![0; n + 1]);
        d[l.alloc_step] += l.size as i128;
        d[l.free_step.unwrap_or(n)] -= l.size as i128;
        // Spilled: off the device, so out of its pool's load.
        for &(from, to) in &l.away {
            d[from.min(n)] -= l.size as i128;
            d[to.min(n)] += l.size as i128;
        }
    }
    let pools: HashMap<&str, PoolLoad> = diffs
        .into_iter()
        .map(|(pool, d)| {
            let mut acc: i128 = 0;
            let load: Vec<u128> = d[..n]
                .iter()
                .map(|x| {
                    acc += x;
                    acc.max(0) as u128
                })
                .collect();
            let tree = MaxTree::new(&load);
            let peak = tree.max(0, n);
            (pool, PoolLoad { tree, peak })
        })
        .collect();
    let time = |step: usize| {
        trace
            .events
            .get(step)
            .or(trace.events.last())
            .map_or(0, |e| e.time_ns)
    };

    let mut out = Vec::new();
    for (l, &container) in lifetimes.iter().zip(&containers) {
        let Some(pool) = pools.get(l.pool.as_str()) else {
            continue;
        };
        let end = l.free_step.unwrap_or(n);
        // Never more than `d`, one allocation's size, so it fits in u64.
        let saving = |ranges: &[(usize, usize)], d: u64| {
            let s = pool.peak - pool.tree.peak_without(ranges, d).min(pool.peak);
            u64::try_from(s).unwrap_or(u64::MAX)
        };
        let mut push =
            |kind: FindingKind, range: (usize, usize), wasted: u64, saved: u64, detail: String| {
                out.push(Finding {
                    kind,
                    id: l.id,
                    label: l.label.clone(),
                    pool: l.pool.clone(),
                    size: l.size,
                    saved,
                    wasted,
                    steps: range,
                    duration_ns: time(range.1).saturating_sub(time(range.0)),
                    detail,
                    backtrace: l.backtrace.clone(),
                });
            };
        let worth = |range: (usize, usize), saved: u64| {
            range.0 < range.1
                && (saved > 0 || time(range.1).saturating_sub(time(range.0)) >= options.min_gap_ns)
        };
        let (Some(first), Some(last)) = (l.uses.first(), l.uses.last()) else {
            let r = (l.alloc_step, end);
            let saved = saving(&[r], l.size);
            push(
                FindingKind::UnusedAllocation,
                r,
                l.size,
                saved,
                format!("{} bytes allocated and never used", l.size),
            );
            if l.free_step.is_none() {
                push(
                    FindingKind::Leak,
                    r,
                    l.size,
                    saved,
                    format!("{} bytes never freed (and never used)", l.size),
                );
            }
            continue;
        };
        // Early allocation.
        let r = (l.alloc_step, first.0);
        let saved = saving(&[r], l.size);
        if worth(r, saved) {
            push(
                FindingKind::EarlyAllocation,
                r,
                l.size,
                saved,
                format!(
                    "allocated {} events ({} ns) before its first use",
                    r.1 - r.0,
                    time(r.1).saturating_sub(time(r.0))
                ),
            );
        }
        // Leak or late deallocation.
        let r = (last.0 + 1, end);
        let saved = saving(&[r], l.size);
        if l.free_step.is_none() {
            push(
                FindingKind::Leak,
                r,
                l.size,
                saved,
                format!(
                    "{} bytes never freed; last used at event {}",
                    l.size, last.0
                ),
            );
        } else if worth(r, saved) {
            push(
                FindingKind::LateDeallocation,
                r,
                l.size,
                saved,
                format!(
                    "freed {} events ({} ns) after its last use",
                    r.1.saturating_sub(r.0),
                    time(r.1).saturating_sub(time(r.0))
                ),
            );
        }
        if container {
            continue;
        }
        // Idleness and dead writes between consecutive uses.
        for (i, w) in l.uses.windows(2).enumerate() {
            let (a, b) = (w[0], w[1]);
            let r = (a.0 + 1, b.0);
            // A gap its pool spilled it through was offloaded already.
            let spilled = l.away.iter().any(|&(x, y)| x < r.1 && r.0 < y);
            let saved = saving(&[r], l.size);
            if b.0 > a.0 + 1 && !spilled && worth(r, saved) {
                push(
                    FindingKind::TemporaryIdleness,
                    r,
                    l.size,
                    saved,
                    format!(
                        "idle for {} events ({} ns) between uses at events {} and {}",
                        r.1 - r.0,
                        time(r.1).saturating_sub(time(r.0)),
                        a.0,
                        b.0
                    ),
                );
            }
            if a.1 == Access::Write && b.1 == Access::Write {
                // Only a dead first write moves the lifetime's start; later ones waste work only.
                let r = if i == 0 {
                    (l.alloc_step, b.0)
                } else {
                    (a.0, b.0)
                };
                let saved = if i == 0 { saving(&[r], l.size) } else { 0 };
                push(
                    FindingKind::DeadWrite,
                    r,
                    l.size,
                    saved,
                    format!(
                        "written at event {} and again at event {} with no read between",
                        a.0, b.0
                    ),
                );
            }
        }
        // Overallocation.
        let used = l.uses.iter().map(|u| u.2).max().unwrap_or(0);
        if l.size > used.saturating_add(options.overallocation_slack) {
            let waste = l.size - used;
            let r = (l.alloc_step, end);
            push(
                FindingKind::Overallocation,
                r,
                waste,
                saving(&[r], waste),
                format!(
                    "{} bytes allocated, at most {used} bytes used by any op",
                    l.size
                ),
            );
        }
    }
    out.sort_by(|a, b| {
        b.saved
            .cmp(&a.saved)
            .then(a.kind.cmp(&b.kind))
            .then(a.id.cmp(&b.id))
    });
    out
}
