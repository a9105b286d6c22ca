//! `SpillPool`: spill under pressure for dynamic use — an opt-in bottom pool over any device pool
//! that, instead of returning out of memory, moves idle allocations to host memory and brings them
//! back transparently on their next use.
//!
//! The dynamic counterpart of the planned offload in [`crate::offload`]: no schedule is known, so
//! the victim is the least recently used allocation that is *movable* (`spill/entry.rs`): not pinned
//! ([`SpillPool::pin`]), not referenced by queued work (its last recorded use, in this pool and in
//! the pool below, has completed), and not *leased*. Every [`DevicePool::resolve`] and the
//! `allocate` that made the allocation lease it until the caller calls
//! [`DevicePool::release`]; leases are counted and never expire, so a range in a caller's hands
//! is never moved under it (the runtime releases after each transfer, dispatch and model step).
//! A victim's bytes are copied to host memory (mapped where device memory is host-visible, else
//! through a `Readback` block) and its device range is freed. The next resolve of its handle
//! allocates a new range (spilling others if needed), copies the bytes back (mapped, or through
//! an `Upload` block) and returns the new range: handles stay valid, only ranges move, which is
//! why this pool issues its own handles (a bottom, like [`ReplayPool`](crate::pool::ReplayPool))
//! rather than passing the inner pool's through.
//!
//! A spill runs whole under the pool's lock (choice, copy out, free), so no lease, pin or use can
//! arrive between the choice and the free. A restore allocates with the lock released, then
//! copies back under it; a concurrent restore of the same handle keeps the first range, a
//! concurrent free wins and the new range is cancelled.
//!
//! When every candidate is busy (in flight or leased), `allocate` waits for one to become
//! idle, with its lock released, for at most [`SpillConfig::max_wait`]; then it returns the inner
//! pool's out-of-memory error. Data is never lost: an allocation leaves device memory only after
//! its bytes are on the host, and a failed spill or restore leaves it where it was.
//!
//! Native only (not compiled on `wasm32`): spills and restores block on their copies, which a
//! browser's thread may not.
//!
//! Limits: a restore waits for its copy (a stall the caller sees); a caller that resolves
//! without releasing keeps the allocation on the device until it is freed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use self::entry::{Entry, Mobility, Site};
use self::listen::Listen;

use crate::backend::{Backend, BlockRange, Ticket};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::trace::TransferKind;
use crate::{Error, Result};

mod copy;
mod entry;
mod listen;

/// Configuration of a [`SpillPool`].
#[derive(Clone, Debug)]
pub struct SpillConfig {
    /// How long `allocate` waits for a busy allocation to become idle before it reports out of
    /// memory (default 2 s).
    pub max_wait: Duration,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            max_wait: Duration::from_secs(2),
        }
    }
}

/// Counters of a [`SpillPool`]. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Allocations moved to host memory.
    pub spills: u64,
    /// Allocations brought back.
    pub restores: u64,
    /// Bytes moved to host memory.
    pub bytes_out: u64,
    /// Bytes moved back to the device.
    pub bytes_in: u64,
    /// Allocations in host memory now.
    pub spilled_now: usize,
}

/// One allocation: what it was asked for, and its state (the inner pool's allocation while on
/// the device).
struct Slot {
    size: u64,
    align: u64,
    label: String,
    e: Entry<Allocation>,
}

struct State {
    slots: Slots<Slot>,
    clock: u64,
    stats: SpillStats,
}

/// See the module doc. `Send + Sync`.
pub struct SpillPool {
    inner: Arc<dyn DevicePool>,
    backend: Arc<dyn Backend>,
    config: SpillConfig,
    name: String,
    state: Mutex<State>,
    listen: Listen,
}

/// Why no allocation could be spilled now.
enum NoVictim {
    /// Some are busy and may become idle: wait and retry.
    Busy,
    /// None can ever be spilled (all pinned, or none on the device).
    None,
}

impl SpillPool {
    /// A spilling pool over `inner` (normally an arena pool of the runtime's backend, `backend`:
    /// the runtime's validating front).
    pub fn new(inner: Arc<dyn DevicePool>, backend: Arc<dyn Backend>, config: SpillConfig) -> Self {
        let name = format!("{} (spilling)", inner.name());
        SpillPool {
            inner,
            backend,
            config,
            name,
            state: Mutex::new(State {
                slots: Slots::new(next_pool_id(), "spill allocation"),
                clock: 0,
                stats: SpillStats::default(),
            }),
            listen: Listen::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the allocation resident: it is brought back now if spilled, and never spilled until
    /// as many [`SpillPool::unpin`]s as pins (pins are counted, so two users may pin one
    /// allocation and each unpin once).
    ///
    /// # Errors
    /// [`Error::StaleHandle`] and the errors of a restore.
    pub fn pin(&self, handle: Handle) -> Result<()> {
        // The resolve's lease holds it on the device until the pin does.
        self.resolve(handle)?;
        let mut st = self.lock();
        let e = &mut st.slots.get_mut(handle)?.e;
        let pinned = e.pin();
        e.release();
        pinned
    }

    /// Removes one pin; with none left the allocation may be spilled again.
    ///
    /// # Errors
    /// [`Error::StaleHandle`]; [`Error::InvalidArgument`] when it is not pinned.
    pub fn unpin(&self, handle: Handle) -> Result<()> {
        self.lock().slots.get_mut(handle)?.e.unpin()
    }

    /// Whether the allocation's bytes are in device memory now.
    ///
    /// # Errors
    /// [`Error::StaleHandle`].
    pub fn is_resident(&self, handle: Handle) -> Result<bool> {
        Ok(self.lock().slots.get(handle)?.e.device().is_some())
    }

    /// The spill counters.
    pub fn spill_stats(&self) -> SpillStats {
        self.lock().stats.clone()
    }

    /// Allocates in the inner pool, spilling idle allocations (never `except`) while it is out of
    /// memory; while every candidate is busy, waits with the lock released, up to `max_wait`.
    fn allocate_spilling(
        &self,
        size: u64,
        align: u64,
        label: &str,
        except: Option<Handle>,
    ) -> Result<Allocation> {
        let deadline = Instant::now() + self.config.max_wait;
        loop {
            let mut st = self.lock();
            match self.inner.allocate(size, align, label) {
                Err(e @ Error::OutOfMemory(_)) => match self.spill_one(&mut st, except)? {
                    Ok(()) => {}
                    Err(NoVictim::Busy) if Instant::now() < deadline => {
                        drop(st);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return Err(e),
                },
                other => return other,
            }
        }
    }

    /// Spills the least recently used movable allocation, whole under the lock (module doc).
    /// `Ok(Err(_))` when there is none.
    fn spill_one(
        &self,
        st: &mut State,
        except: Option<Handle>,
    ) -> Result<std::result::Result<(), NoVictim>> {
        let done = self.backend.completed()?;
        let mut busy = false;
        let mut best: Option<(u64, Handle)> = None;
        for (h, slot) in st.slots.iter_handles() {
            let Some(a) = slot.e.device() else { continue };
            if Some(h) == except {
                continue;
            }
            match slot.e.mobility(done, self.inner.last_use(a.handle)?) {
                Mobility::Fixed => {}
                Mobility::Busy => busy = true,
                Mobility::Movable => {
                    if best.is_none_or(|(t, _)| slot.e.touched < t) {
                        best = Some((slot.e.touched, h));
                    }
                }
            }
        }
        let Some((_, victim)) = best else {
            return Ok(Err(if busy { NoVictim::Busy } else { NoVictim::None }));
        };
        let e = &mut st.slots.get_mut(victim)?.e;
        let Some(a) = e.device() else {
            return Err(Error::invariant("a spill victim is on the device", "host"));
        };
        let range = self.inner.resolve(a.handle)?;
        let bytes = self.read(range)?;
        let n = bytes.len() as u64;
        let inner_use = self.inner.last_use(a.handle)?;
        let a = e.spilled(bytes, done, inner_use)?;
        if let Err(err) = self.inner.free(a.handle) {
            // Still on the device: it stays there.
            e.restored(a);
            return Err(err);
        }
        st.stats.spills += 1;
        st.stats.bytes_out += n;
        st.stats.spilled_now += 1;
        self.listen
            .notify(|l| l.transferred(victim, TransferKind::Spill, n));
        Ok(Ok(()))
    }

    /// Brings a leased, spilled allocation back: a new range allocated with the lock released,
    /// then the copy under it.
    fn restore(&self, handle: Handle, size: u64, align: u64, label: &str) -> Result<BlockRange> {
        let a = self.allocate_spilling(size, align, label, Some(handle))?;
        let mut st = self.lock();
        let slot = match st.slots.get_mut(handle) {
            Ok(slot) => slot,
            Err(err) => {
                // Freed meanwhile.
                self.inner.cancel(a.handle)?;
                return Err(err);
            }
        };
        let Site::Host(bytes) = &slot.e.site else {
            // Another thread brought it back meanwhile; this lease holds that range.
            let Some(cur) = slot.e.device() else {
                return Err(Error::invariant(
                    "a restored allocation is on the device",
                    "host",
                ));
            };
            self.inner.cancel(a.handle)?;
            return self.inner.resolve(cur.handle);
        };
        if let Err(err) = self.write(a.range, bytes) {
            self.inner.cancel(a.handle)?;
            return Err(err);
        }
        let n = bytes.len() as u64;
        slot.e.restored(a);
        st.stats.restores += 1;
        st.stats.bytes_in += n;
        st.stats.spilled_now -= 1;
        self.listen
            .notify(|l| l.transferred(handle, TransferKind::Restore, n));
        Ok(a.range)
    }
}

impl DevicePool for SpillPool {
    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let a = self.allocate_spilling(size, align, label, None)?;
        let mut st = self.lock();
        st.clock += 1;
        let touched = st.clock;
        let handle = st.slots.insert(Slot {
            size,
            align,
            label: label.to_string(),
            e: Entry::allocated(a, touched),
        });
        Ok(Allocation {
            handle,
            range: a.range,
        })
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let slot = st.slots.get_for_remove(handle)?;
        if let Some(a) = slot.e.device() {
            self.inner
                .free_after(a.handle, ticket.max(slot.e.last_use))?;
        }
        let slot = st.slots.remove(handle)?;
        if slot.e.device().is_none() {
            st.stats.spilled_now -= 1;
        }
        self.listen.notify(|l| l.reclaimed(handle));
        Ok(())
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        let mut st = self.lock();
        let slot = st.slots.get_for_remove(handle)?;
        if let Some(a) = slot.e.device() {
            self.inner.cancel(a.handle)?;
        }
        let slot = st.slots.remove(handle)?;
        if slot.e.device().is_none() {
            st.stats.spilled_now -= 1;
        }
        self.listen.notify(|l| l.reclaimed(handle));
        Ok(())
    }

    /// Where the bytes are now, leased until [`DevicePool::release`]; a spilled allocation is
    /// brought back first (see the module doc).
    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let (size, align, label) = {
            let mut st = self.lock();
            st.clock += 1;
            let clock = st.clock;
            let slot = st.slots.get_mut(handle)?;
            slot.e.lease(clock)?;
            match slot.e.device() {
                Some(a) => {
                    let range = self.inner.resolve(a.handle);
                    if range.is_err() {
                        slot.e.release();
                    }
                    return range;
                }
                None => (slot.size, slot.align, slot.label.clone()),
            }
        };
        // Leased and in host memory: nothing moves it until this restore ends.
        let restored = self.restore(handle, size, align, &label);
        if restored.is_err()
            && let Ok(slot) = self.lock().slots.get_mut(handle)
        {
            slot.e.release();
        }
        restored
    }

    /// Where the bytes are if on the device; a spilled allocation stays in host memory.
    fn resident(&self, handle: Handle) -> Result<Option<BlockRange>> {
        let st = self.lock();
        match st.slots.get(handle)?.e.device() {
            Some(a) => self.inner.resident(a.handle),
            None => Ok(None),
        }
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let e = &mut st.slots.get_mut(handle)?.e;
        e.record_use(ticket);
        match e.device() {
            Some(a) => self.inner.mark_used(a.handle, ticket),
            None => Ok(()),
        }
    }

    fn release(&self, handle: Handle) -> Result<()> {
        self.lock().slots.get_mut(handle)?.e.release();
        Ok(())
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        let st = self.lock();
        let e = &st.slots.get(handle)?.e;
        match e.device() {
            Some(a) => Ok(e.last_use.max(self.inner.last_use(a.handle)?)),
            None => Ok(e.last_use),
        }
    }

    fn label(&self, handle: Handle) -> Result<String> {
        Ok(self.lock().slots.get(handle)?.label.clone())
    }

    fn reclaim(&self) -> Result<()> {
        self.inner.reclaim()
    }

    fn trim(&self) -> Result<u64> {
        // Without this pool's lock: the pressure path may call it from inside an allocate.
        self.inner.trim()
    }

    fn stats(&self) -> PoolStats {
        self.inner.stats()
    }

    fn live_allocations(&self) -> Vec<LiveAllocation> {
        let st = self.lock();
        LiveAllocation::all_in(&st.slots, |s| (&s.label, s.size))
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.inner.set_listener(self.listen.set(listener));
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner.check_invariants()?;
        let st = self.lock();
        let host = st.slots.iter().filter(|s| s.e.device().is_none()).count();
        if host != st.stats.spilled_now {
            return Err(format!(
                "spill pool: {host} allocations in host memory, counter says {}",
                st.stats.spilled_now
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod stress_tests;
#[cfg(test)]
mod tests;
