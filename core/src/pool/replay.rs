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
//! A `ReplayPool` is itself a [`DevicePool`], so a [`Runtime`](crate::Runtime) can use it
//! ([`Runtime::with_pool`](crate::Runtime::with_pool)): allocations made outside a step are served
//! by the dynamic pool and recorded nowhere.
//!
//! Handles carry a generation like every pool handle: a double free or a stale use is an error.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::backend::{BlockRange, Ticket};
use crate::plan::replay::{Recorder, RepeatDetector, ReplayPlan, Replayer, Step};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::{Error, Result};

/// Where one replay allocation's bytes came from.
#[derive(Copy, Clone, Debug)]
enum Source {
    /// The planned arena, allocation `ordinal` of the plan, during step `step`, at `offset` bytes
    /// into the arena.
    Planned {
        ordinal: u32,
        step: u64,
        offset: u64,
    },
    /// The dynamic pool.
    Dynamic(Handle),
}

#[derive(Clone, Debug)]
struct Entry {
    source: Source,
    /// Step that made the allocation, and its ordinal in that step's recording (`None` outside a
    /// step).
    step: u64,
    recorded: Option<u32>,
    size: u64,
    label: String,
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

/// Record-and-replay over a dynamic pool. See the module doc. `Send + Sync`.
pub struct ReplayPool {
    pool: Arc<dyn DevicePool>,
    plan_time_limit: Duration,
    state: Mutex<State>,
}

impl ReplayPool {
    /// A replay pool drawing its arena and its dynamic allocations from `pool`. `plan_time_limit`
    /// bounds the planner per compiled sequence.
    pub fn new(pool: Arc<dyn DevicePool>, plan_time_limit: Duration) -> Self {
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

    fn allocate_entry(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let mut st = self.lock();
        if !st.in_step {
            let a = self.pool.allocate(size, align, label)?;
            st.stats.dynamic += 1;
            let step = st.step;
            let handle = st.slots.insert(Entry {
                source: Source::Dynamic(a.handle),
                step,
                recorded: None,
                size: a.range.size,
                label: label.to_string(),
            });
            return Ok(Allocation {
                handle,
                range: a.range,
            });
        }
        let step = match st.replayer.as_mut() {
            Some(r) => r.allocate(size, align),
            None => Step::Diverged,
        };
        let arena = st.planned.as_ref().map(|p| p.arena);
        let (source, range) = match (step, arena) {
            (Step::Planned { ordinal, offset }, Some(arena)) => {
                let base = self.pool.resolve(arena.handle)?;
                let range = BlockRange {
                    block: base.block,
                    offset: base.offset + offset,
                    size,
                };
                let source = Source::Planned {
                    ordinal,
                    step: st.step,
                    offset,
                };
                (source, range)
            }
            _ => {
                let a = self.pool.allocate(size, align, label)?;
                (Source::Dynamic(a.handle), a.range)
            }
        };
        // Recorded only once it succeeded: a failed allocate leaves the recording as it was.
        let recorded = match st.recorder.allocate(size, align) {
            Ok(r) => r,
            Err(e) => {
                if let Source::Dynamic(h) = source {
                    self.pool.cancel(h)?;
                }
                return Err(e);
            }
        };
        match source {
            Source::Planned { .. } => st.stats.planned += 1,
            Source::Dynamic(_) => st.stats.dynamic += 1,
        }
        let step = st.step;
        let handle = st.slots.insert(Entry {
            source,
            step,
            recorded: Some(recorded),
            size: range.size,
            label: label.to_string(),
        });
        Ok(Allocation { handle, range })
    }

    /// Frees an entry after `ticket`; `cancel` undoes a dynamic allocation instead of freeing it.
    fn release_entry(&self, handle: Handle, ticket: Ticket, cancel: bool) -> Result<()> {
        let mut st = self.lock();
        let entry = st.slots.get_for_remove(handle)?.clone();
        if let Source::Planned { step, .. } = entry.source {
            if step != st.step || !st.in_step {
                return Err(Error::invalid(
                    "a planned replay allocation must be freed within its step",
                ));
            }
        }
        // The dynamic pool first: if it refuses, nothing here has changed.
        match entry.source {
            Source::Dynamic(h) if cancel => self.pool.cancel(h)?,
            Source::Dynamic(h) => self.pool.free_after(h, ticket)?,
            Source::Planned { .. } => st.arena_last_use = st.arena_last_use.max(ticket),
        }
        st.slots.remove(handle)?;
        // A dynamic allocation may outlive its step; its free belongs to no later recording.
        if let (Some(recorded), true) = (entry.recorded, entry.step == st.step && st.in_step) {
            st.recorder.free(recorded)?;
        }
        if let Source::Planned { ordinal, .. } = entry.source {
            if let Some(r) = st.replayer.as_mut() {
                r.free(ordinal);
            }
        }
        Ok(())
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

    /// Counters of record and replay (the dynamic pool's are [`DevicePool::stats`]).
    pub fn replay_stats(&self) -> ReplayStats {
        self.lock().stats.clone()
    }

    /// The underlying dynamic pool.
    pub fn pool(&self) -> &Arc<dyn DevicePool> {
        &self.pool
    }
}

/// Allocations inside a step follow the plan when they repeat it (from the dynamic pool
/// otherwise); allocations outside a step come from the dynamic pool. A planned allocation must be
/// freed within its step ([`Error::InvalidArgument`] otherwise).
impl DevicePool for ReplayPool {
    fn name(&self) -> &str {
        self.pool.name()
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        self.allocate_entry(size, align, label)
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        self.release_entry(handle, ticket, false)
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        self.release_entry(handle, Ticket::DONE, true)
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let st = self.lock();
        let entry = st.slots.get(handle)?;
        match entry.source {
            Source::Dynamic(h) => self.pool.resolve(h),
            Source::Planned { offset, .. } => {
                let arena = st
                    .planned
                    .as_ref()
                    .ok_or_else(|| Error::invalid("internal: planned allocation without a plan"))?;
                let base = self.pool.resolve(arena.arena.handle)?;
                Ok(BlockRange {
                    block: base.block,
                    offset: base.offset + offset,
                    size: entry.size,
                })
            }
        }
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        match st.slots.get(handle)?.source {
            Source::Dynamic(h) => self.pool.mark_used(h, ticket),
            Source::Planned { .. } => {
                st.arena_last_use = st.arena_last_use.max(ticket);
                Ok(())
            }
        }
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        let st = self.lock();
        match st.slots.get(handle)?.source {
            Source::Dynamic(h) => self.pool.last_use(h),
            Source::Planned { .. } => Ok(st.arena_last_use),
        }
    }

    fn label(&self, handle: Handle) -> Result<String> {
        Ok(self.lock().slots.get(handle)?.label.clone())
    }

    fn reclaim(&self) -> Result<()> {
        self.pool.reclaim()
    }

    fn trim(&self) -> Result<u64> {
        self.pool.trim()
    }

    fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .slots
            .iter_handles()
            .map(|(handle, e)| LiveAllocation {
                handle,
                label: e.label.clone(),
                size: e.size,
            })
            .collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.size));
        v
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.pool.set_listener(listener)
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.pool.check_invariants()?;
        let st = self.lock();
        let dynamic = st
            .slots
            .iter()
            .filter(|e| matches!(e.source, Source::Dynamic(_)))
            .count();
        // The dynamic pool holds our dynamic allocations plus the planned arena.
        let held = self.pool.stats().allocations;
        let arena = usize::from(st.planned.is_some());
        if held < dynamic + arena {
            return Err(format!(
                "dynamic pool holds {held} allocations for {dynamic} dynamic + {arena} arena"
            ));
        }
        Ok(())
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
