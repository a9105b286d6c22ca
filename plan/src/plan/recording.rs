//! Record and replay: plan a repeating allocation sequence once, then serve it from one arena.
//!
//! Workloads such as a transformer's forward pass allocate and free the same sizes in the same order
//! on every step (ONNX Runtime's memory patterns, TFLite's arena planner). [`Recorder`] captures one
//! run's allocate/free sequence; [`ReplayPlan::compile`] turns it into buffers (lifetimes from event
//! order) and plans them with [`solve`], so the arena is the planned peak, with no fragmentation and
//! no allocator work at run time. A [`Replayer`] then walks a later run event by event: each
//! allocation that matches the recording gets its planned offset in O(1); the first mismatch (a
//! larger size, another alignment, another order) is a [`Step::Diverged`], after which the caller
//! serves everything from its dynamic pool. [`RepeatDetector`] says when a new sequence has started to
//! repeat, so the caller re-records and re-plans.
//!
//! **Shapes.** A recording's *shape* is its event sequence without the sizes: which allocation
//! comes when, its alignment, and the order of frees. Runs of one model at different input sizes
//! (a sequence length) share a shape. The recorder hashes the shape as it goes (O(1) per event), so
//! telling whether a run repeats costs nothing per allocation and no recording is ever cloned or
//! compared whole. An allocation no larger than its recorded size fits in its planned slot, so a
//! plan of a shape's largest sizes ([`Recording::widen`]) serves every smaller run of that shape.
//!
//! Safety argument for divergence: the plan lets two allocations share bytes only when the recorded
//! sequence freed one before allocating the other. The replayer hands out a planned offset only while
//! every event so far matched the recording exactly, so every buffer the plan assumed dead is dead.
//! After a divergence it hands out nothing, and the planned allocations still live stay valid.
//!
//! This module is pure bookkeeping (no memory is touched); the runtime wires it to a device arena.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Buffer, Plan, SolveOptions, solve};
use crate::{Error, Result};

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// An allocation of `size` bytes at a multiple of `align`; it is allocation number `ordinal`
    /// (0-based) of the recording.
    Allocate {
        /// Bytes requested.
        size: u64,
        /// Alignment requested (a power of two).
        align: u64,
    },
    /// The free of allocation number `ordinal`.
    Free {
        /// Which allocation (its 0-based position among the allocations).
        ordinal: u32,
    },
}

/// The allocations among `events`, as (size, alignment), in order.
fn allocations(events: &[Event]) -> impl Iterator<Item = (u64, u64)> + '_ {
    events.iter().filter_map(|e| match *e {
        Event::Allocate { size, align } => Some((size, align)),
        Event::Free { .. } => None,
    })
}

/// Captures one run's allocation sequence. Ids it returns are allocation ordinals (0, 1, 2, ...).
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    events: Vec<Event>,
    /// Per ordinal: whether it is still live.
    live: Vec<bool>,
    /// Hash of the shape so far (the events without their sizes).
    shape: u64,
    /// Hash of the sizes so far.
    sizes: u64,
}

/// Folds one word into a shape hash (FxHash's mixing step: a rotate, a xor and a multiply, cheap
/// enough to run on every event).
fn mix(hash: u64, word: u64) -> u64 {
    (hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Recorder::default()
    }

    /// Records an allocation and returns its ordinal, the id to pass to [`Recorder::free`].
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for size 0; [`Error::InvalidAlignment`] for an alignment that is not a
    /// power of two up to 2^62; [`Error::TooLarge`] beyond 2^32 allocations.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<u32> {
        if size == 0 {
            return Err(Error::ZeroSize {
                what: "recorded allocation",
            });
        }
        if !align.is_power_of_two() || align > 1 << 62 {
            return Err(Error::InvalidAlignment {
                align,
                max: 1 << 62,
            });
        }
        let ordinal = u32::try_from(self.live.len()).map_err(|_| Error::TooLarge {
            what: "recording",
            requested: self.live.len() as u64 + 1,
            limit: u32::MAX as u64,
            limit_name: "allocations per recording",
        })?;
        self.events.push(Event::Allocate { size, align });
        self.live.push(true);
        self.shape = mix(self.shape, u64::from(align.trailing_zeros()) << 1);
        self.sizes = mix(self.sizes, size);
        Ok(ordinal)
    }

    /// Records the free of allocation `ordinal`.
    ///
    /// # Errors
    /// [`Error::DoubleFree`] if it was already freed; [`crate::ArgumentError::OutOfRange`] for an
    /// ordinal this recorder never returned.
    pub fn free(&mut self, ordinal: u32) -> Result<()> {
        match self.live.get_mut(ordinal as usize) {
            Some(live @ true) => {
                *live = false;
                self.events.push(Event::Free { ordinal });
                self.shape = mix(self.shape, u64::from(ordinal) << 1 | 1);
                Ok(())
            }
            Some(false) => Err(Error::DoubleFree {
                what: "recorded allocation",
                slot: ordinal,
                generation: 0,
            }),
            None => Err(crate::ArgumentError::out_of_range(
                "recorded allocation",
                ordinal.into(),
                self.live.len() as u64,
            )
            .into()),
        }
    }

    /// Whether nothing has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Ends the recording. Allocations never freed live until the end of the sequence.
    pub fn finish(self) -> Recording {
        Recording {
            events: self.events,
            shape: self.shape,
            sizes: self.sizes,
        }
    }
}

/// A finished recording: the event sequence of one run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Recording {
    events: Vec<Event>,
    /// Hash of the shape (the events without their sizes), built as the events were recorded.
    shape: u64,
    /// Hash of the allocation sizes, built the same way.
    sizes: u64,
}

impl Recording {
    /// The events in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// A hash of the recording's shape: its events without the sizes (see the module doc). Equal
    /// shapes have equal hashes; different shapes almost never do.
    pub fn shape(&self) -> u64 {
        self.shape
    }

    /// Raises every allocation's size to the larger of its own and `other`'s, when both have the
    /// same shape; the widened recording's plan then serves both runs. Returns `None` when the
    /// shapes differ (nothing changes), else whether any size grew. Linear in the events.
    pub fn widen(&mut self, other: &Recording) -> Option<bool> {
        if !self.same_shape(other) {
            return None;
        }
        let (mut sizes, mut grew) = (0, false);
        for (a, b) in self.events.iter_mut().zip(&other.events) {
            if let (Event::Allocate { size, .. }, Event::Allocate { size: s, .. }) = (a, b) {
                grew |= *s > *size;
                *size = (*size).max(*s);
                sizes = mix(sizes, *size);
            }
        }
        self.sizes = sizes;
        Some(grew)
    }

    /// Whether both recordings have one shape: the same events but for their sizes. Linear.
    fn same_shape(&self, other: &Recording) -> bool {
        self.shape == other.shape
            && self.events.len() == other.events.len()
            && self
                .events
                .iter()
                .zip(&other.events)
                .all(|(a, b)| match (a, b) {
                    (Event::Allocate { align: x, .. }, Event::Allocate { align: y, .. }) => x == y,
                    (Event::Free { ordinal: x }, Event::Free { ordinal: y }) => x == y,
                    _ => false,
                })
    }

    /// The allocation sizes in order.
    fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        allocations(&self.events).map(|(size, _)| size)
    }

    /// Whether the recording has no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Number of allocations.
    pub fn allocations(&self) -> usize {
        allocations(&self.events).count()
    }

    /// The planner instance: allocation `k` becomes buffer `k`, live from its allocate event to its
    /// free event (event indices, half-open), or to the end of the sequence if never freed.
    pub fn buffers(&self) -> Vec<Buffer> {
        let mut buffers = Vec::new();
        let end = self.events.len() as u64;
        for (t, e) in self.events.iter().enumerate() {
            match *e {
                Event::Allocate { size, align } => {
                    buffers.push(Buffer {
                        lower: t as u64,
                        upper: end,
                        size,
                        align,
                    });
                }
                Event::Free { ordinal } => {
                    if let Some(b) = buffers.get_mut(ordinal as usize) {
                        b.upper = t as u64;
                    }
                }
            }
        }
        buffers
    }
}

/// A compiled plan for a recording: the planned offset of every allocation and the arena size.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    events: Vec<Event>,
    offsets: Vec<u64>,
    arena_size: u64,
    lower_bound: u64,
    algorithm: String,
}

impl ReplayPlan {
    /// Plans `recording` with [`solve`] within `time_limit`; the arena size is the planned peak.
    ///
    /// # Errors
    /// Those of [`solve`] (none for a recording made by [`Recorder`], whose events are valid).
    pub fn compile(recording: &Recording, time_limit: Duration) -> Result<ReplayPlan> {
        let buffers = recording.buffers();
        let solution = solve(
            &buffers,
            &SolveOptions {
                time_limit,
                baseline: false,
                ..SolveOptions::default()
            },
        )?;
        let Plan { offsets, peak } = solution.plan.ok_or_else(|| {
            Error::invariant(
                "the planner always returns a plan when no capacity is set",
                "plan::solve returned none for a replay recording",
            )
        })?;
        Ok(ReplayPlan {
            events: recording.events.clone(),
            offsets,
            arena_size: peak,
            lower_bound: solution.lower_bound,
            algorithm: solution.algorithm,
        })
    }

    /// Bytes the arena needs: the planned peak.
    pub fn arena_size(&self) -> u64 {
        self.arena_size
    }

    /// The max-load lower bound of the recording: no allocator can serve it in fewer bytes (of
    /// a [stretched](ReplayPlan::stretched) plan, the bound of its predicted sizes: an estimate).
    pub fn lower_bound(&self) -> u64 {
        self.lower_bound
    }

    /// Planned offset of each allocation, by ordinal.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// Size and alignment of the first allocation, if any: what a run must start with to follow
    /// this plan.
    pub fn first_allocation(&self) -> Option<(u64, u64)> {
        allocations(&self.events).next()
    }

    /// Which planner produced the offsets.
    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }

    /// Starts replaying a new run against this plan.
    /// The plan is shared (`Arc`) so a runtime can keep a replayer beside the plan it walks.
    pub fn replayer(self: &Arc<Self>) -> Replayer {
        Replayer {
            plan: self.clone(),
            cursor: 0,
            next_ordinal: 0,
            diverged: false,
        }
    }
}

/// What the replayer says about one event of a new run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The event matches the recording. For an allocation: place it at `offset` in the arena; free
    /// it later with `ordinal`.
    Planned {
        /// Allocation ordinal (the id for [`Replayer::free`]).
        ordinal: u32,
        /// Offset in bytes in the arena (0 for a free).
        offset: u64,
    },
    /// The run has left the recording (here or earlier): serve this allocation from the dynamic
    /// pool; a free of an arena allocation needs no action.
    Diverged,
}

/// Walks one run against a [`ReplayPlan`], O(1) per event.
#[derive(Debug, Clone)]
pub struct Replayer {
    plan: Arc<ReplayPlan>,
    /// Next event of the recording expected.
    cursor: usize,
    next_ordinal: u32,
    diverged: bool,
}

impl Replayer {
    /// An allocation of the new run. It follows the plan when the recording allocates next, at
    /// least `size` bytes, with the same alignment: a smaller allocation fits in its planned slot.
    pub fn allocate(&mut self, size: u64, align: u64) -> Step {
        if !self.diverged
            && let Some(&Event::Allocate { size: s, align: a }) = self.plan.events.get(self.cursor)
            && size <= s
            && a == align
        {
            self.cursor += 1;
            let ordinal = self.next_ordinal;
            self.next_ordinal += 1;
            return Step::Planned {
                ordinal,
                offset: self.plan.offsets[ordinal as usize],
            };
        }
        self.diverged = true;
        Step::Diverged
    }

    /// The free of a planned allocation of the new run (its `ordinal`). A free out of the recorded
    /// order diverges too: a later planned allocation could otherwise overlap a buffer still live.
    pub fn free(&mut self, ordinal: u32) -> Step {
        if !self.diverged && self.plan.events.get(self.cursor) == Some(&Event::Free { ordinal }) {
            self.cursor += 1;
            return Step::Planned { ordinal, offset: 0 };
        }
        self.diverged = true;
        Step::Diverged
    }

    /// Whether the run has left the recording.
    pub fn diverged(&self) -> bool {
        self.diverged
    }

    /// Whether every recorded event has been matched (the run repeated the recording exactly).
    pub fn complete(&self) -> bool {
        !self.diverged && self.cursor == self.plan.events.len()
    }
}

/// Says when a sequence of runs has settled into a repeating pattern worth planning.
///
/// Feed it each run's recording; it answers how many consecutive runs (this one included) had
/// the same shape and the same sizes. The caller compiles a [`ReplayPlan`] once the count reaches
/// its threshold (2 = "the same recording twice") and re-plans when a different sequence starts
/// repeating. O(1) per run: it compares hashes (the shape's and the
/// sizes, both built while recording), never recordings. A collision can only make a plan that the next run leaves at once,
/// because the [`Replayer`] checks every event.
#[derive(Debug, Clone, Default)]
pub struct RepeatDetector {
    last: Option<(u64, u64)>,
    run: u32,
    /// Runs seen so far by fingerprint, to report sequences that recur non-consecutively.
    seen: HashMap<(u64, u64), u32>,
}

impl RepeatDetector {
    /// A detector that has seen nothing.
    pub fn new() -> Self {
        RepeatDetector::default()
    }

    /// The recording's fingerprint: its shape hash and the hash of its sizes.
    fn fingerprint(recording: &Recording) -> (u64, u64) {
        (recording.shape, recording.sizes)
    }

    /// Observes one run; returns how many consecutive runs ended with this sequence.
    pub fn observe(&mut self, recording: &Recording) -> u32 {
        let f = Self::fingerprint(recording);
        *self.seen.entry(f).or_insert(0) += 1;
        if self.last == Some(f) {
            self.run += 1;
        } else {
            self.last = Some(f);
            self.run = 1;
        }
        self.run
    }

    /// How many runs so far had this sequence (consecutive or not).
    pub fn times_seen(&self, recording: &Recording) -> u32 {
        self.seen
            .get(&Self::fingerprint(recording))
            .copied()
            .unwrap_or(0)
    }
}

mod stretch;
#[cfg(test)]
mod tests;

pub use stretch::Growth;
