//! The replay pool's plans, one per shape (see [`crate::plan::recording`]): each shape keeps the
//! widest run seen (every allocation at its largest size) and the plan of that run, so a run of
//! any size up to the widest follows it. The arena is sized for the largest plan kept.
//!
//! One plan per shape rather than one per size bucket: runs of one shape never overlap in time,
//! so they share one arena whose size is set by the largest run either way; planning the widest
//! run gives every run a plan without a bucket of its own, and a larger run re-plans once, or
//! not at all when it follows the plan stretched to it ([`Shapes::stretch`]). A shape learns how
//! each allocation grows ([`Growth`]) from the first run larger or smaller than its widest, so
//! after one re-plan the stretch predicts allocations that grow faster than the first (attention
//! scores with the square of the sequence).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::Result;
use crate::plan::recording::{Growth, Recording, ReplayPlan, Replayer};

/// One shape: its widest run and, once planned, the plan of it.
struct Shape {
    /// The caller's key of the steps that recorded it.
    key: u64,
    widest: Recording,
    /// How its allocations grow with the first, once two runs' first allocations differed.
    growth: Option<Growth>,
    /// Runs of this shape seen.
    runs: u32,
    plan: Option<Arc<ReplayPlan>>,
    /// Whether `widest` grew since `plan` was compiled.
    stale: bool,
    /// Step that last used or recorded this shape (least recently used goes first).
    used: u64,
}

/// The plans of a replay pool, by shape hash and the caller's step key.
pub(super) struct Shapes {
    by_shape: HashMap<u64, Shape>,
    /// Shape of the last step that ended: the next step tries its plan first.
    current: Option<u64>,
}

impl Shapes {
    pub(super) fn new() -> Self {
        Shapes {
            by_shape: HashMap::new(),
            current: None,
        }
    }

    /// The replayer a step with `key` should follow given its first allocation: the current
    /// shape's plan if it takes the allocation, else the tightest plan that does (the smallest
    /// first slot that is large enough), among plans of steps with the same key whose arena fits
    /// in `arena` bytes. O(shapes), once per step.
    pub(super) fn choose(
        &self,
        key: u64,
        size: u64,
        align: u64,
        arena: u64,
    ) -> Option<(u64, Replayer)> {
        // The plan's first slot, when the plan takes this step.
        let fits = |s: &Shape| {
            let plan = s.plan.as_ref().filter(|_| s.key == key)?;
            let (first, first_align) = plan.first_allocation()?;
            (plan.arena_size() <= arena && size <= first && align == first_align).then_some(first)
        };
        let chosen = self
            .current
            .filter(|k| self.by_shape.get(k).and_then(fits).is_some())
            .or_else(|| {
                self.by_shape
                    .iter()
                    .filter_map(|(k, s)| fits(s).map(|first| (first, *k)))
                    .min()
                    .map(|(_, k)| k)
            })?;
        let plan = self.by_shape.get(&chosen)?.plan.as_ref()?;
        Some((chosen, plan.replayer()))
    }

    /// For a step of `key` that no plan takes: the plan of the same key whose first allocation
    /// has `align` and is the largest below `size`, [stretched](ReplayPlan::stretched) to
    /// `size` as its shape's allocations grow, with its shape; `None` when no plan stretches so
    /// that its first slot takes the allocation. O(shapes) plus the stretch, n log n in the
    /// plan, once per such step.
    pub(super) fn stretch(&self, key: u64, size: u64, align: u64) -> Option<(u64, ReplayPlan)> {
        let (id, plan, growth) = self
            .by_shape
            .iter()
            .filter_map(|(id, s)| {
                let plan = s.plan.as_ref().filter(|_| s.key == key)?;
                let (first, first_align) = plan.first_allocation()?;
                (first < size && first_align == align).then_some((first, *id, plan, &s.growth))
            })
            .max_by_key(|(first, id, _, _)| (*first, *id))
            .map(|(_, id, plan, growth)| (id, plan, growth))?;
        let stretched = plan.stretched(size, growth.as_ref())?;
        let (first, _) = stretched.first_allocation()?;
        (first >= size).then_some((id, stretched))
    }

    /// Makes `plan`, which the step `run` followed to the end, shape `id`'s plan: the shape
    /// widens to the run, and the plan (which serves every run the shape's plan served, and
    /// this one) is kept without compiling. O(events).
    pub(super) fn adopt(&mut self, id: u64, run: &Recording, plan: Arc<ReplayPlan>, step: u64) {
        if let Some(s) = self.by_shape.get_mut(&id) {
            s.learn(run);
            if s.widest.widen(run).is_some() {
                s.plan = Some(plan);
                s.stale = false;
            }
            s.runs = s.runs.saturating_add(1);
            s.used = step;
        }
        self.current = Some(id);
    }

    /// Notes that a step followed shape `key`'s plan to the end (O(1)).
    pub(super) fn followed(&mut self, key: u64, step: u64) {
        if let Some(s) = self.by_shape.get_mut(&key) {
            s.runs = s.runs.saturating_add(1);
            s.used = step;
        }
        self.current = Some(key);
    }

    /// Records a run that did not follow a plan to the end: widens its shape and, once the shape
    /// has been seen `repeats` times, (re)compiles its plan within `time_limit`. Keeps at most
    /// `max_shapes` shapes, evicting the least recently used. Returns whether a plan was compiled.
    ///
    /// # Errors
    /// Planner errors (none for a recording made by the recorder).
    pub(super) fn record(
        &mut self,
        key: u64,
        run: Recording,
        step: u64,
        repeats: u32,
        max_shapes: usize,
        time_limit: Duration,
    ) -> Result<bool> {
        let id = run.shape() ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let shape = match self.by_shape.get_mut(&id) {
            Some(s) => {
                s.learn(&run);
                match s.widest.widen(&run) {
                    Some(grew) => s.stale |= grew,
                    // A hash collision between two shapes: the newer run takes the entry.
                    None => *s = Shape::first(key, run, step),
                }
                s
            }
            None => self
                .by_shape
                .entry(id)
                .or_insert(Shape::first(key, run, step)),
        };
        shape.runs = shape.runs.saturating_add(1);
        shape.used = step;
        let compiled = shape.runs >= repeats && (shape.plan.is_none() || shape.stale);
        if compiled {
            shape.plan = Some(Arc::new(ReplayPlan::compile(&shape.widest, time_limit)?));
            shape.stale = false;
        }
        self.current = Some(id);
        while self.by_shape.len() > max_shapes.max(1) {
            let Some(oldest) = self
                .by_shape
                .iter()
                .filter(|(k, _)| Some(**k) != self.current)
                .min_by_key(|(k, s)| (s.used, **k))
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.by_shape.remove(&oldest);
        }
        Ok(compiled)
    }

    /// Bytes the arena needs for every plan kept.
    pub(super) fn arena_needed(&self) -> u64 {
        self.by_shape
            .values()
            .filter_map(|s| s.plan.as_ref().map(|p| p.arena_size()))
            .max()
            .unwrap_or(0)
    }

    /// The lower bound of the current shape's plan, in bytes (0 without one).
    pub(super) fn current_lower_bound(&self) -> u64 {
        self.current
            .and_then(|k| {
                self.by_shape
                    .get(&k)?
                    .plan
                    .as_ref()
                    .map(|p| p.lower_bound())
            })
            .unwrap_or(0)
    }

    /// Plans kept.
    pub(super) fn planned(&self) -> usize {
        self.by_shape.values().filter(|s| s.plan.is_some()).count()
    }
}

impl Shape {
    fn first(key: u64, run: Recording, step: u64) -> Self {
        Shape {
            key,
            widest: run,
            growth: None,
            runs: 0,
            plan: None,
            stale: false,
            used: step,
        }
    }

    /// Fits the shape's growth to `run` and its widest run, when their first allocations
    /// differ (the last such pair wins: the newest sizes). Linear in the events.
    fn learn(&mut self, run: &Recording) {
        if let Some(growth) = Growth::between(&self.widest, run) {
            self.growth = Some(growth);
        }
    }
}
