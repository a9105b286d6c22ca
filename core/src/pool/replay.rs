//! Record and replay on a device pool: serve a repeating allocation sequence from one planned arena.
//!
//! A workload that allocates the same tensors in the same order every step (a transformer layer
//! loop, an inference at any sequence length) brackets each step with [`ReplayPool::begin_step`]
//! and [`ReplayPool::end_step`]. Each step is recorded (`plan::recording::Recorder`, which hashes the
//! step's *shape*, its events without their sizes, as it goes). Once a shape has been seen
//! [`ReplayConfig::repeats`] times it is planned (`plan::recording::ReplayPlan`), for the largest size
//! each of its allocations has had, and later steps of that shape take their offsets from the plan
//! in O(1), with zero fragmentation, as long as no allocation is larger than planned.
//!
//! * **No double reservation.** The planned arena is one backend block of exactly the largest
//!   plan's size, reserved against the budget only after the dynamic pool has returned its idle
//!   blocks (the recorded steps' memory), so in steady state the pool reserves the plan.
//! * **O(1) per allocation.** Following a plan is one comparison per event; telling whether a step
//!   repeats compares hashes, never recordings. Work linear in a step happens only at the end of a
//!   step that did not follow a plan (re-planning), and at both ends of a step on a stretched plan
//!   (the stretch, n log n, and adopting it).
//! * **Dynamic shapes.** One plan per shape, kept across steps of other shapes (up to
//!   [`ReplayConfig::max_shapes`], least recently used evicted); a step takes the plan that fits its
//!   first allocation. A step whose first allocation is larger than every plan's (a sequence length
//!   never seen) takes the plan of its key with the largest first allocation, stretched to it
//!   ([`ReplayPlan::stretched`]) on an arena of the stretched size: each allocation gets room
//!   for the size it is predicted to grow to, in proportion to the first allocation until two
//!   runs of the shape have shown how it grows ([`Growth`](crate::plan::recording::Growth):
//!   attention scores without flash attention grow with the square). The step then follows the
//!   plan from its start, and the plan becomes its shape's, so a new longest step does not run
//!   dynamically beside the arena (`docs/performance.md`, "Replay pool"). The first event a plan
//!   cannot serve (a larger size, another order) diverges: from there the step is served by the
//!   dynamic pool, without error, and the plan stays; the step then widens its shape's plan.
//!
//! A `ReplayPool` is itself a [`DevicePool`], so a [`Runtime`](crate::Runtime) can use it
//! ([`Runtime::with_pool`](crate::Runtime::with_pool)): allocations made outside a step are served
//! by the dynamic pool and recorded nowhere.
//!
//! Handles carry a generation like every pool handle: a double free or a stale use is an error.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use crate::plan::recording::{Recorder, ReplayPlan, Replayer};
use crate::pool::arena::ArenaPool;
use crate::pool::device_pool::DevicePool;
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::{Error, Result};

mod arena;
mod expandable;
mod serve;
mod shapes;

use shapes::Shapes;

/// Configuration of a [`ReplayPool`].
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// Planner time per compiled plan. Default 50 ms; longer can shave a few percent off the arena.
    pub plan_time_limit: Duration,
    /// Steps of one shape recorded before it is planned (at least 1). Default 1: the first step
    /// records, the second replays (ONNX Runtime's memory patterns); 2 plans only shapes that
    /// recur, at the price of one more dynamic step per shape.
    pub repeats: u32,
    /// Shapes (plans) kept; the least recently used goes when a new one comes. Default 8. The
    /// arena is sized for the largest plan kept.
    pub max_shapes: usize,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            plan_time_limit: Duration::from_millis(50),
            repeats: 1,
            max_shapes: 8,
        }
    }
}

/// Where one replay allocation's bytes came from.
#[derive(Copy, Clone, Debug)]
enum Source {
    /// The planned arena, during step `step`, at `offset` bytes into the arena.
    Planned { step: u64, offset: u64 },
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
    /// Allocations served by the dynamic pool (no plan yet, outside a step, or after a divergence).
    pub dynamic: u64,
    /// Steps that did not follow a plan to the end although plans existed (left theirs, or found
    /// none that takes their first allocation).
    pub divergences: u64,
    /// Plans compiled (a shape's first plan, and each widening).
    pub plans: u64,
    /// Steps that started on a stretched plan: their first allocation was larger than every
    /// plan's, and a plan was stretched to it ([`ReplayPlan::stretched`]).
    pub stretched: u64,
    /// Shapes with a plan now.
    pub shapes: usize,
    /// Size of the arena block now held, in bytes (0 without one).
    pub arena_size: u64,
    /// Size the plans kept need, in bytes; above `arena_size` while the arena waits to grow.
    pub arena_needed: u64,
    /// Max-load lower bound of the current shape's plan, in bytes.
    pub lower_bound: u64,
    /// Arena blocks reserved from the backend.
    pub arena_reserves: u64,
    /// Arena reservations refused by the budget or the device (the steps then run dynamically).
    pub arena_refusals: u64,
}

struct State {
    slots: Slots<Entry>,
    recorder: Recorder,
    shapes: Shapes,
    /// The open step's plan (by shape) and where it is in it.
    replayer: Option<(u64, Replayer)>,
    /// The open step's plan is a shape's plan stretched to the step's first allocation (kept
    /// as the shape's plan if the step follows it to the end).
    stretched: Option<Arc<ReplayPlan>>,
    arena: Option<arena::Block>,
    step: u64,
    in_step: bool,
    /// The open (or last) step's key.
    key: u64,
    /// Live planned allocations and their bytes.
    planned_live: usize,
    planned_bytes: u64,
    /// Highest reserved bytes (dynamic pool plus arena) seen at a reservation.
    peak_reserved: u64,
    stats: ReplayStats,
}

/// Record-and-replay over a dynamic [`ArenaPool`]. See the module doc. `Send + Sync`.
pub struct ReplayPool {
    pool: Arc<ArenaPool>,
    source: arena::Source,
    config: ReplayConfig,
    state: Mutex<State>,
}

impl ReplayPool {
    /// A replay pool whose steps' arena comes from `pool`'s backend and budget, and whose other
    /// allocations `pool` serves.
    ///
    /// Build `pool` with [`ArenaPool::with_budget`] (a runtime hands its budget to
    /// [`Runtime::with_pool`](crate::Runtime::with_pool)'s closure): the arena is charged to that
    /// budget beside the pool's blocks, so one limit and one pressure path cover both. A pool made
    /// by [`ArenaPool::new`] owns its budget and expects only its own blocks in it: the arena
    /// still counts against its limit, but its invariant check reports the arena's bytes.
    pub fn new(pool: Arc<ArenaPool>, config: ReplayConfig) -> Self {
        let source = arena::Source {
            backend: pool.backend().clone(),
            budget: pool.budget().clone(),
            kind: pool.config().kind,
            name: format!("{} (replay arena)", pool.name()),
            listener: RwLock::new(None),
        };
        ReplayPool {
            source,
            config,
            state: Mutex::new(State {
                slots: Slots::new(next_pool_id(), "replay allocation"),
                recorder: Recorder::new(),
                shapes: Shapes::new(),
                replayer: None,
                stretched: None,
                arena: None,
                step: 0,
                in_step: false,
                key: 0,
                planned_live: 0,
                planned_bytes: 0,
                peak_reserved: 0,
                stats: ReplayStats::default(),
            }),
            pool,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a step: recording restarts; the step's first allocation picks the plan it follows.
    /// Same as [`ReplayPool::begin_step_keyed`] with key 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the previous step was not ended.
    pub fn begin_step(&self) -> Result<()> {
        self.begin_step_keyed(0)
    }

    /// Starts a step that follows only plans recorded by steps of the same `key`. Without keys a
    /// step takes the plan that fits its first allocation, preferring the last step's; steps of
    /// different models whose sequences start alike (one model a prefix of another) should carry
    /// different keys, or each may start on the other's plan and leave it halfway.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the previous step was not ended.
    pub fn begin_step_keyed(&self, key: u64) -> Result<()> {
        let mut st = self.lock();
        if st.in_step {
            return Err(Error::invalid("begin_step while a step is open"));
        }
        st.in_step = true;
        st.key = key;
        st.recorder = Recorder::new();
        st.replayer = None;
        st.stretched = None;
        Ok(())
    }

    /// Ends a step. A step that followed its plan to the end costs nothing more; any other step is
    /// recorded into its shape, which is (re)planned once seen [`ReplayConfig::repeats`] times;
    /// then the arena is grown to what the plans need, once the old one is idle, after the dynamic
    /// pool has returned its idle blocks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a step or while planned allocations of the step are still
    /// live (their bytes would be handed out again next step); planner and backend errors.
    pub fn end_step(&self) -> Result<()> {
        let mut st = self.lock();
        if !st.in_step {
            return Err(Error::invalid("end_step without begin_step"));
        }
        if st.planned_live > 0 {
            return Err(Error::invalid(format!(
                "end_step with {} planned allocation(s) still live",
                st.planned_live
            )));
        }
        st.in_step = false;
        let step = st.step;
        st.step += 1;
        st.stats.steps += 1;
        let recording = std::mem::take(&mut st.recorder).finish();
        let stretched = st.stretched.take();
        let left_stretched = stretched.is_some();
        match (st.replayer.take(), stretched) {
            (Some((shape, r)), None) if r.complete() => {
                st.shapes.followed(shape, step);
                return Ok(());
            }
            (Some((shape, r)), Some(plan)) if r.complete() => {
                st.shapes.adopt(shape, &recording, plan, step);
                return Ok(());
            }
            (Some(_), _) => st.stats.divergences += 1,
            (None, _) if st.shapes.planned() > 0 && !recording.is_empty() => {
                st.stats.divergences += 1;
            }
            (None, _) => {}
        }
        if recording.allocations() == 0 {
            return Ok(());
        }
        let key = st.key;
        let compiled = st.shapes.record(
            key,
            recording,
            step,
            self.config.repeats.max(1),
            self.config.max_shapes,
            self.config.plan_time_limit,
        )?;
        if compiled {
            st.stats.plans += 1;
        }
        self.fit_arena(&mut st, left_stretched)
    }

    /// Makes the arena the size the plans need, when it is idle: releases it, has the dynamic pool
    /// return its idle blocks, and reserves the new size (never the two together). With `exact`
    /// (after a step left a stretched plan: its first allocation may have been another model's)
    /// an idle arena larger than the plans need goes back too, so a wrong stretch costs memory
    /// for one step only.
    fn fit_arena(&self, st: &mut State, exact: bool) -> Result<()> {
        let needed = st.shapes.arena_needed();
        if st.arena.is_some_and(|b| exact && b.size > needed) {
            self.release_idle_arena(st)?;
        }
        if needed > 0 {
            self.arena_of(st, needed)?;
        }
        Ok(())
    }

    /// Holds an arena of at least `needed` bytes if it can: an idle smaller one is released,
    /// the dynamic pool returns its idle blocks, and the new size is reserved (never the two
    /// together). Returns whether it holds one. One in use (planned allocations live, or work
    /// not done) stays, and the arena grows at a later step.
    fn arena_of(&self, st: &mut State, needed: u64) -> Result<bool> {
        if st.arena.is_some_and(|b| b.size >= needed) {
            return Ok(true);
        }
        if st.arena.is_some() && !self.release_idle_arena(st)? {
            return Ok(false);
        }
        self.pool.trim()?;
        // Planned sizes and offsets are multiples of the copy alignment, so the peak is too.
        let mut block = self.source.reserve(needed)?;
        if block.is_none() && self.source.budget.relieve(None)? > 0 {
            block = self.source.reserve(needed)?;
        }
        match block {
            Some(b) => {
                st.stats.arena_reserves += 1;
                st.arena = Some(b);
                st.peak_reserved = st.peak_reserved.max(self.pool.stats().reserved + b.size);
                Ok(true)
            }
            None => {
                st.stats.arena_refusals += 1;
                Ok(false)
            }
        }
    }

    /// Releases the arena if no planned allocation is live and no work uses it; returns
    /// whether no arena is held now.
    fn release_idle_arena(&self, st: &mut State) -> Result<bool> {
        let Some(block) = st.arena else {
            return Ok(true);
        };
        if st.planned_live > 0 || !self.source.idle(&block)? {
            return Ok(false);
        }
        self.source.release(&block)?;
        st.arena = None;
        Ok(true)
    }

    /// Counters of record and replay (the dynamic pool's are [`DevicePool::stats`]).
    pub fn replay_stats(&self) -> ReplayStats {
        let st = self.lock();
        let mut s = st.stats.clone();
        s.shapes = st.shapes.planned();
        s.arena_size = st.arena.map_or(0, |b| b.size);
        s.arena_needed = st.shapes.arena_needed();
        s.lower_bound = st.shapes.current_lower_bound();
        s
    }

    /// The underlying dynamic pool.
    pub fn pool(&self) -> &Arc<ArenaPool> {
        &self.pool
    }
}

impl Drop for ReplayPool {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let Some(block) = st.arena.take() else {
            return;
        };
        // As the arena pool does: wait for every use, and leave the block to the backend rather
        // than free it under running work when the wait fails (on `wasm32` submitting is enough:
        // WebGPU keeps a destroyed buffer's memory until its work is done).
        let backend = &self.source.backend;
        let drained = backend.flush();
        #[cfg(not(target_arch = "wasm32"))]
        let drained = drained.and_then(|t| backend.wait(t));
        if drained.is_ok() {
            let _ = self.source.release(&block);
        }
    }
}

#[cfg(test)]
mod tests;
