//! Record and replay on a device pool: serve a repeating allocation sequence from one planned arena.
//!
//! A workload that allocates the same sizes in the same order every step (a transformer layer
//! loop, a fixed-shape inference) brackets each step with [`ReplayPool::begin_step`] and
//! [`ReplayPool::end_step`]. The pool records every step (`plan::replay::Recorder`); once the same
//! sequence has been seen twice in a row it plans it (`plan::replay::ReplayPlan`) and reserves one
//! arena of the planned peak from the underlying [`ArenaPool`]. Later steps that repeat the sequence
//! get their offsets in O(1) with zero fragmentation. The first event that differs (a dynamic
//! shape) diverges: from there the step is served by the dynamic pool, without error. When a new
//! sequence repeats, it is re-planned and the old arena returned.
//!
//! Handles carry a generation like every pool handle: a double free or a stale use is an error.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::backend::{BlockRange, Ticket};
use crate::plan::replay::{Recorder, RepeatDetector, ReplayPlan, Replayer, Step};
use crate::pool::arena::{Allocation, ArenaPool};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::{Error, Result};

/// Where one replay allocation's bytes came from.
#[derive(Copy, Clone, Debug)]
enum Source {
    /// The planned arena, allocation `ordinal` of the plan, during step `step`.
    Planned { ordinal: u32, step: u64 },
    /// The dynamic pool.
    Dynamic(Handle),
}

#[derive(Copy, Clone, Debug)]
struct Entry {
    source: Source,
    /// Step that made the allocation, and its ordinal in that step's recording.
    step: u64,
    recorded: u32,
}

/// A live allocation of a [`ReplayPool`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReplayAllocation {
    /// The owning handle.
    pub handle: Handle,
    /// Where the bytes are.
    pub range: BlockRange,
}

/// Counters of a [`ReplayPool`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Completed steps.
    pub steps: u64,
    /// Allocations served from the planned arena.
    pub planned: u64,
    /// Allocations served by the dynamic pool (no plan yet, or after a divergence).
    pub dynamic: u64,
    /// Steps that left their plan.
    pub divergences: u64,
    /// Plans compiled.
    pub plans: u64,
    /// Size of the current planned arena in bytes (0 without a plan).
    pub arena_size: u64,
    /// Max-load lower bound of the current plan's recording, in bytes.
    pub lower_bound: u64,
}

struct Planned {
    plan: Arc<ReplayPlan>,
    arena: Allocation,
}

struct State {
    slots: Slots<Entry>,
    recorder: Recorder,
    detector: RepeatDetector,
    planned: Option<Planned>,
    replayer: Option<Replayer>,
    step: u64,
    in_step: bool,
    /// Latest ticket of work on any planned allocation: the arena's free waits for it.
    arena_last_use: Ticket,
    stats: ReplayStats,
}

/// Record-and-replay over an [`ArenaPool`]. See the module doc. `Send + Sync`.
pub struct ReplayPool {
    pool: Arc<ArenaPool>,
    plan_time_limit: Duration,
    state: Mutex<State>,
}

impl ReplayPool {
    /// A replay pool drawing its arena and its dynamic allocations from `pool`. `plan_time_limit`
    /// bounds the planner per compiled sequence.
    pub fn new(pool: Arc<ArenaPool>, plan_time_limit: Duration) -> Self {
        ReplayPool {
            pool,
            plan_time_limit,
            state: Mutex::new(State {
                slots: Slots::new(next_pool_id(), "replay allocation"),
                recorder: Recorder::new(),
                detector: RepeatDetector::new(),
                planned: None,
                replayer: None,
                step: 0,
                in_step: false,
                arena_last_use: Ticket::DONE,
                stats: ReplayStats::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a step: recording restarts and, with a plan, replay starts at its first event.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the previous step was not ended.
    pub fn begin_step(&self) -> Result<()> {
        let mut st = self.lock();
        if st.in_step {
            return Err(Error::invalid("begin_step while a step is open"));
        }
        st.in_step = true;
        st.recorder = Recorder::new();
        st.replayer = st.planned.as_ref().map(|p| p.plan.replayer());
        Ok(())
    }

    /// Allocates `size` bytes aligned to `align`: from the plan while the step follows it, else
    /// from the dynamic pool.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a step; the dynamic pool's errors.
    pub fn allocate(&self, size: u64, align: u64, label: &str) -> Result<ReplayAllocation> {
        let mut st = self.lock();
        if !st.in_step {
            return Err(Error::invalid("allocate outside begin_step/end_step"));
        }
        let recorded = st.recorder.allocate(size, align)?;
        let step = match st.replayer.as_mut() {
            Some(r) => r.allocate(size, align),
            None => Step::Diverged,
        };
        let arena = st.planned.as_ref().map(|p| p.arena);
        let (source, range) = match (step, arena) {
            (Step::Planned { ordinal, offset }, Some(arena)) => {
                st.stats.planned += 1;
                let base = self.pool.resolve(arena.handle)?;
                let range = BlockRange {
                    block: base.block,
                    offset: base.offset + offset,
                    size,
                };
                (
                    Source::Planned {
                        ordinal,
                        step: st.step,
                    },
                    range,
                )
            }
            _ => {
                let a = self.pool.allocate(size, align, label)?;
                st.stats.dynamic += 1;
                (Source::Dynamic(a.handle), a.range)
            }
        };
        let step = st.step;
        let handle = st.slots.insert(Entry {
            source,
            step,
            recorded,
        });
        Ok(ReplayAllocation { handle, range })
    }

    /// Records that work with `ticket` uses the allocation.
    ///
    /// # Errors
    /// [`Error::StaleHandle`], [`Error::ForeignHandle`].
    pub fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        match st.slots.get(handle)?.source {
            Source::Dynamic(h) => self.pool.mark_used(h, ticket),
            Source::Planned { .. } => {
                st.arena_last_use = st.arena_last_use.max(ticket);
                Ok(())
            }
        }
    }

    /// Frees an allocation. Planned bytes return to the plan (reused by the allocation the plan
    /// placed there next); dynamic ones to the pool after their last use.
    ///
    /// # Errors
    /// [`Error::DoubleFree`], [`Error::StaleHandle`], [`Error::ForeignHandle`]; a free of a planned
    /// allocation from an earlier step is [`Error::InvalidArgument`] (planned bytes live for one
    /// step).
    pub fn free(&self, handle: Handle) -> Result<()> {
        let mut st = self.lock();
        let entry = match st.slots.get(handle) {
            Ok(e) => *e,
            // `remove` tells a double free apart from a stale or foreign handle.
            Err(e) => return Err(st.slots.remove(handle).err().unwrap_or(e)),
        };
        if let Source::Planned { step, .. } = entry.source {
            if step != st.step || !st.in_step {
                return Err(Error::invalid(
                    "a planned replay allocation must be freed within its step",
                ));
            }
        }
        st.slots.remove(handle)?;
        // A dynamic allocation may outlive its step; its free belongs to no later recording.
        if entry.step == st.step && st.in_step {
            st.recorder.free(entry.recorded)?;
        }
        match entry.source {
            Source::Planned { ordinal, .. } => {
                if let Some(r) = st.replayer.as_mut() {
                    r.free(ordinal);
                }
                Ok(())
            }
            Source::Dynamic(h) => self.pool.free(h),
        }
    }

    /// Ends a step. When the step repeated the previous one exactly and is not the sequence already
    /// planned, compiles a plan for it and reserves its arena (returning the old one).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a step or while planned allocations of the step are still
    /// live (their bytes would be handed out again next step); planner and pool errors.
    pub fn end_step(&self) -> Result<()> {
        let mut st = self.lock();
        if !st.in_step {
            return Err(Error::invalid("end_step without begin_step"));
        }
        let step = st.step;
        let live_planned = st
            .slots
            .iter()
            .filter(|e| matches!(e.source, Source::Planned { step: s, .. } if s == step))
            .count();
        if live_planned > 0 {
            return Err(Error::invalid(format!(
                "end_step with {live_planned} planned allocation(s) still live"
            )));
        }
        st.in_step = false;
        st.step += 1;
        st.stats.steps += 1;
        let followed = st.replayer.as_ref().is_some_and(Replayer::complete);
        if st.replayer.as_ref().is_some_and(Replayer::diverged) {
            st.stats.divergences += 1;
        }
        st.replayer = None;
        let recording = std::mem::take(&mut st.recorder).finish();
        let repeats = st.detector.observe(&recording);
        if followed || repeats < 2 || recording.allocations() == 0 {
            return Ok(());
        }
        let plan = Arc::new(ReplayPlan::compile(&recording, self.plan_time_limit)?);
        let arena = self
            .pool
            .allocate(plan.arena_size().max(1), 1, "replay arena")?;
        if let Some(old) = st.planned.take() {
            self.pool.free_after(old.arena.handle, st.arena_last_use)?;
        }
        st.stats.plans += 1;
        st.stats.arena_size = plan.arena_size();
        st.stats.lower_bound = plan.lower_bound();
        st.planned = Some(Planned { plan, arena });
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> ReplayStats {
        self.lock().stats.clone()
    }

    /// The underlying dynamic pool.
    pub fn pool(&self) -> &Arc<ArenaPool> {
        &self.pool
    }
}

impl Drop for ReplayPool {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = st.planned.take() {
            let _ = self.pool.free_after(p.arena.handle, st.arena_last_use);
        }
    }
}

#[cfg(test)]
mod tests;
