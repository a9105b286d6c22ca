//! Serving allocations: inside a step from the plan the step follows, or from the dynamic pool
//! once it has left it; outside a step from the dynamic pool. The [`DevicePool`] face of the
//! replay pool.

use std::sync::{Arc, PoisonError, TryLockError};

use super::{Entry, ReplayPool, Source, State};
use crate::backend::{BlockRange, Ticket};
use crate::plan::recording::Step;
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::Handle;
use crate::{Error, Result};

impl ReplayPool {
    /// A dynamic allocation, noting the reservation peak it may raise.
    fn allocate_dynamic(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Allocation> {
        let a = self.pool.allocate(size, align, label)?;
        self.note_peak(st);
        Ok(a)
    }

    /// Notes the reservation peak the dynamic pool may have raised.
    pub(super) fn note_peak(&self, st: &mut State) {
        let arena = st.arena.map_or(0, |b| b.size);
        st.peak_reserved = st.peak_reserved.max(self.pool.stats().reserved + arena);
    }

    /// Files dynamic allocation `a` under a handle of this pool, outside any recording.
    pub(super) fn unrecorded(st: &mut State, a: Allocation, label: &str) -> Allocation {
        st.stats.dynamic += 1;
        let step = st.step;
        let handle = st.slots.insert(Entry {
            source: Source::Dynamic(a.handle),
            step,
            recorded: None,
            size: a.range.size,
            label: label.to_string(),
        });
        Allocation {
            handle,
            range: a.range,
        }
    }

    fn allocate_entry(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let mut st = self.lock();
        if !st.in_step {
            let a = self.allocate_dynamic(&mut st, size, align, label)?;
            return Ok(Self::unrecorded(&mut st, a, label));
        }
        // Recorded and planned as the dynamic pool rounds it, so a planned slot and a dynamic
        // allocation are interchangeable.
        let (rounded, align) = self.pool.check_request(size, align)?;
        if st.recorder.is_empty() {
            self.choose_plan(&mut st, rounded, align)?;
        }
        let step = match st.replayer.as_mut() {
            Some((_, r)) => r.allocate(rounded, align),
            None => Step::Diverged,
        };
        let (source, range) = match (step, st.arena) {
            (Step::Planned { offset, .. }, Some(arena)) => {
                let range = BlockRange {
                    block: arena.id,
                    offset,
                    size: rounded,
                };
                let source = Source::Planned {
                    step: st.step,
                    offset,
                };
                (source, range)
            }
            _ => {
                let a = self.allocate_dynamic(&mut st, size, align, label)?;
                (Source::Dynamic(a.handle), a.range)
            }
        };
        // Recorded only once it succeeded: a failed allocate leaves the recording as it was.
        let recorded = match st.recorder.allocate(rounded, align) {
            Ok(r) => r,
            Err(e) => {
                if let Source::Dynamic(h) = source {
                    self.pool.cancel(h)?;
                }
                return Err(e.into());
            }
        };
        match source {
            Source::Planned { .. } => {
                st.stats.planned += 1;
                st.planned_live += 1;
                st.planned_bytes += rounded;
            }
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

    /// At a step's first allocation: the plan that takes it, if the arena holds one. A step
    /// larger than every plan of its key, with no planned allocation live, takes a plan
    /// stretched to its first allocation ([`Shapes::stretch`](super::shapes::Shapes::stretch)),
    /// on an arena of the stretched size ([`ReplayPool::arena_of`]): a sequence length never
    /// seen then runs from a plan instead of beside the arena in the dynamic pool. A step that
    /// no plan takes runs dynamically; if no planned allocation is live, an idle arena is
    /// returned now, so the step does not run beside it (it re-plans at its end).
    fn choose_plan(&self, st: &mut State, size: u64, align: u64) -> Result<()> {
        let arena = st.arena.map_or(0, |b| b.size);
        st.replayer = st.shapes.choose(st.key, size, align, arena);
        if st.replayer.is_some() || st.planned_live > 0 {
            return Ok(());
        }
        if let Some((shape, plan)) = st.shapes.stretch(st.key, size, align)
            && self.arena_of(st, plan.arena_size())?
        {
            let plan = Arc::new(plan);
            st.replayer = Some((shape, plan.replayer()));
            st.stretched = Some(plan);
            st.stats.stretched += 1;
            return Ok(());
        }
        self.release_idle_arena(st)?;
        Ok(())
    }

    /// Frees an entry after `ticket`; `cancel` undoes a dynamic allocation instead of freeing it.
    fn release_entry(&self, handle: Handle, ticket: Ticket, cancel: bool) -> Result<()> {
        let mut st = self.lock();
        let entry = st.slots.get_for_remove(handle)?.clone();
        if let Source::Planned { step, .. } = entry.source
            && (step != st.step || !st.in_step)
        {
            return Err(Error::invariant(
                "a planned replay allocation is freed within its step (end_step refuses to \
                     end a step with one live)",
                format!("allocation of step {step} freed at step {}", st.step),
            ));
        }
        // The dynamic pool first: if it refuses, nothing here has changed.
        match entry.source {
            Source::Dynamic(h) if cancel => self.pool.cancel(h)?,
            Source::Dynamic(h) => self.pool.free_after(h, ticket)?,
            Source::Planned { .. } => {
                if let Some(a) = st.arena.as_mut() {
                    a.last_use = a.last_use.max(ticket);
                }
                st.planned_live -= 1;
                st.planned_bytes -= entry.size;
            }
        }
        st.slots.remove(handle)?;
        // A dynamic allocation may outlive its step; its free belongs to no later recording.
        if let (Some(recorded), true) = (entry.recorded, entry.step == st.step && st.in_step) {
            st.recorder.free(recorded)?;
            if let Some((_, r)) = st.replayer.as_mut() {
                r.free(recorded);
            }
        }
        Ok(())
    }
}

/// Allocations inside a step follow the plan when they repeat it (from the dynamic pool
/// otherwise); allocations outside a step come from the dynamic pool. A planned allocation must be
/// freed within its step.
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
                let arena = st.arena.ok_or_else(|| {
                    Error::invariant(
                        "the arena is held while planned allocations are live",
                        "a planned allocation has no arena",
                    )
                })?;
                Ok(BlockRange {
                    block: arena.id,
                    offset,
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
                if let Some(a) = st.arena.as_mut() {
                    a.last_use = a.last_use.max(ticket);
                }
                Ok(())
            }
        }
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        let st = self.lock();
        match st.slots.get(handle)?.source {
            Source::Dynamic(h) => self.pool.last_use(h),
            Source::Planned { .. } => Ok(st.arena.map_or(Ticket::DONE, |a| a.last_use)),
        }
    }

    fn label(&self, handle: Handle) -> Result<String> {
        Ok(self.lock().slots.get(handle)?.label.clone())
    }

    fn expandable(&self) -> Option<&dyn crate::pool::Expandable> {
        self.pool
            .expandable()
            .map(|_| self as &dyn crate::pool::Expandable)
    }

    fn reclaim(&self) -> Result<()> {
        self.pool.reclaim()
    }

    /// Trims the dynamic pool, and returns the arena when no step is open and no work uses it (the
    /// next step runs dynamically and re-reserves it at its end). Under the pressure path, called
    /// from inside this pool's own allocation, the arena is left alone.
    fn trim(&self) -> Result<u64> {
        let mut released = self.pool.trim()?;
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(released),
        };
        if let Some(block) = st.arena
            && !st.in_step
            && st.planned_live == 0
            && self.source.idle(&block)?
        {
            self.source.release(&block)?;
            st.arena = None;
            released += block.size;
        }
        Ok(released)
    }

    fn stats(&self) -> PoolStats {
        let mut s = self.pool.stats();
        let st = self.lock();
        if let Some(a) = st.arena {
            s.reserved += a.size;
            s.blocks += 1;
        }
        s.peak_reserved = s.peak_reserved.max(st.peak_reserved);
        s.in_use += st.planned_bytes;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.allocations += st.planned_live;
        s.total_allocations += st.stats.planned;
        s.blocks_allocated += st.stats.arena_reserves;
        s.blocks_freed += st.stats.arena_reserves - u64::from(st.arena.is_some());
        s
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        let st = self.lock();
        LiveAllocation::all_in(&st.slots, |e| (&e.label, e.size))
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        *self
            .source
            .listener
            .write()
            .unwrap_or_else(PoisonError::into_inner) = listener.clone();
        self.pool.set_listener(listener)
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.pool.check_invariants()?;
        let st = self.lock();
        let (mut dynamic, mut planned, mut planned_bytes) = (0, 0, 0);
        for e in st.slots.iter() {
            match e.source {
                Source::Dynamic(_) => dynamic += 1,
                Source::Planned { offset, .. } => {
                    planned += 1;
                    planned_bytes += e.size;
                    let arena = st.arena.map_or(0, |a| a.size);
                    if offset + e.size > arena {
                        return Err(format!(
                            "planned allocation [{offset}, +{}) outside the {arena}-byte arena",
                            e.size
                        ));
                    }
                }
            }
        }
        if (planned, planned_bytes) != (st.planned_live, st.planned_bytes) {
            return Err(format!(
                "{planned} planned allocations of {planned_bytes} bytes, counted {} of {}",
                st.planned_live, st.planned_bytes
            ));
        }
        let held = self.pool.stats().allocations;
        if held < dynamic {
            return Err(format!(
                "dynamic pool holds {held} allocations for {dynamic} dynamic ones"
            ));
        }
        Ok(())
    }
}
