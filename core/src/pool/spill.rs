//! `SpillPool`: spill under pressure for dynamic use — an opt-in bottom pool over any device pool
//! that, instead of returning out of memory, moves idle allocations to host memory and brings them
//! back transparently on their next use.
//!
//! The dynamic counterpart of the planned offload in [`crate::offload`]: no schedule is known, so
//! the victim is the least recently used allocation that is *idle* — not pinned
//! ([`SpillPool::pin`]), not referenced by queued work (its last recorded use, in this pool and in
//! the pool below, has completed), and not *leased*: a `resolve` hands out a range the caller is
//! about to use, so it leases the allocation until the caller records that use with `mark_used`
//! (the runtime does for every write and dispatch), or, for callers that never record one (a
//! synchronous read), until [`SpillConfig::lease`] has passed. Its bytes are
//! copied to host memory (mapped where device memory is host-visible, else through a `Readback`
//! block) and its device range is freed. The next [`DevicePool::resolve`] of its handle allocates
//! a new range (spilling others if needed), copies the bytes back (mapped, or through an `Upload`
//! block) and returns the new range: handles stay valid, only ranges move, which is why this pool
//! issues its own handles (a bottom, like [`ReplayPool`](crate::pool::ReplayPool)) rather than
//! passing the inner pool's through.
//!
//! When every candidate is busy (in flight or leased), `allocate` waits for one to become
//! idle, with its lock released, for at most [`SpillConfig::max_wait`]; then it returns the inner
//! pool's out-of-memory error. Data is never lost: an allocation leaves device memory only after
//! its bytes are on the host, and a failed spill or restore leaves it where it was.
//!
//! Native only (not compiled on `wasm32`): spills and restores block on their copies, which a
//! browser's thread may not.
//!
//! Limits: a restore waits for its copy (a stall the caller sees); a range obtained from
//! `resolve` stays valid until its use is recorded or the lease ends, so callers that hold ranges
//! longer (kernels recorded for later submission) pin the allocation.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{Backend, BlockDesc, BlockRange, MemoryKind, Ticket};
use crate::pool::device_pool::{Allocation, DevicePool, LiveAllocation, PoolListener, PoolStats};
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::{Error, Result};

/// Configuration of a [`SpillPool`].
#[derive(Clone, Debug)]
pub struct SpillConfig {
    /// How long a `resolve` not followed by a `mark_used` keeps the allocation from being spilled
    /// (default 1 s): the longest a caller may hold a range before using it. Shorter spills
    /// sooner after synchronous reads, at the risk of moving a range a slow caller still holds.
    pub lease: Duration,
    /// How long `allocate` waits for a busy allocation to become idle before it reports out of
    /// memory (default 2 s).
    pub max_wait: Duration,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            lease: Duration::from_secs(1),
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

/// Where an allocation's bytes are.
enum Site {
    /// In the inner pool, under this handle.
    Device(Allocation),
    /// In host memory (the spilled bytes, padded to the copy alignment).
    Host(Vec<u8>),
}

struct Entry {
    size: u64,
    align: u64,
    label: String,
    site: Site,
    pinned: bool,
    /// Logical time of the last resolve or use (LRU order).
    touched: u64,
    /// Wall time of the last resolve.
    resolved_at: Instant,
    /// Resolved and not yet used: its range may be in a caller's hands (module doc).
    leased: bool,
    /// Latest ticket recorded against it.
    last_use: Ticket,
}

struct State {
    slots: Slots<Entry>,
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
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the allocation resident: it is brought back now if spilled, and never spilled until
    /// [`SpillPool::unpin`].
    ///
    /// # Errors
    /// [`Error::StaleHandle`] and the errors of a restore.
    pub fn pin(&self, handle: Handle) -> Result<()> {
        self.resolve(handle)?;
        self.lock().slots.get_mut(handle)?.pinned = true;
        Ok(())
    }

    /// Lets a pinned allocation be spilled again.
    ///
    /// # Errors
    /// [`Error::StaleHandle`].
    pub fn unpin(&self, handle: Handle) -> Result<()> {
        self.lock().slots.get_mut(handle)?.pinned = false;
        Ok(())
    }

    /// Whether the allocation's bytes are in device memory now.
    ///
    /// # Errors
    /// [`Error::StaleHandle`].
    pub fn is_resident(&self, handle: Handle) -> Result<bool> {
        Ok(matches!(
            self.lock().slots.get(handle)?.site,
            Site::Device(_)
        ))
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

    /// Spills the least recently used idle allocation. `Ok(Err(_))` when there is none.
    fn spill_one(
        &self,
        st: &mut State,
        except: Option<Handle>,
    ) -> Result<std::result::Result<(), NoVictim>> {
        let done = self.backend.completed()?;
        let mut busy = false;
        let mut best: Option<(u64, Handle)> = None;
        for (h, e) in st.slots.iter_handles() {
            let Site::Device(a) = &e.site else { continue };
            if e.pinned || Some(h) == except {
                continue;
            }
            let in_flight = e.last_use > done || self.inner.last_use(a.handle)? > done;
            let leased = e.leased && e.resolved_at.elapsed() < self.config.lease;
            if in_flight || leased {
                busy = true;
                continue;
            }
            if best.is_none_or(|(t, _)| e.touched < t) {
                best = Some((e.touched, h));
            }
        }
        let Some((_, victim)) = best else {
            return Ok(Err(if busy { NoVictim::Busy } else { NoVictim::None }));
        };
        let e = st.slots.get_mut(victim)?;
        let Site::Device(a) = e.site else {
            return Err(Error::invariant("a spill victim is on the device", "host"));
        };
        let range = self.inner.resolve(a.handle)?;
        let bytes = self.read(range)?;
        self.inner.free(a.handle)?;
        let n = bytes.len() as u64;
        e.site = Site::Host(bytes);
        st.stats.spills += 1;
        st.stats.bytes_out += n;
        st.stats.spilled_now += 1;
        Ok(Ok(()))
    }

    /// Copies a device range to host memory (all work on it has completed).
    fn read(&self, range: BlockRange) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; range.size as usize];
        if self.backend.capabilities().device_host_visible {
            self.backend
                .read_mapped(range.block, range.offset, &mut buf)?;
            return Ok(buf);
        }
        let block = self.backend.alloc_block(&BlockDesc {
            kind: MemoryKind::Readback,
            size: range.size,
            label: "tensormem spill (out)",
        })?;
        let dst = BlockRange {
            block,
            offset: 0,
            size: range.size,
        };
        let done = self
            .backend
            .copy(range, dst)
            .and_then(|t| self.backend.wait(t))
            .and_then(|()| self.backend.read_mapped(block, 0, &mut buf));
        let freed = self.backend.free_block(block);
        done.and(freed).map(|()| buf)
    }

    /// Copies host bytes into a device range; returns after they are in place.
    fn write(&self, range: BlockRange, bytes: &[u8]) -> Result<()> {
        if self.backend.capabilities().device_host_visible {
            return self.backend.write_mapped(range.block, range.offset, bytes);
        }
        let block = self.backend.alloc_block(&BlockDesc {
            kind: MemoryKind::Upload,
            size: range.size,
            label: "tensormem spill (in)",
        })?;
        let src = BlockRange {
            block,
            offset: 0,
            size: range.size,
        };
        let done = self
            .backend
            .write_mapped(block, 0, bytes)
            .and_then(|()| self.backend.copy(src, range))
            .and_then(|t| self.backend.wait(t));
        let freed = self.backend.free_block(block);
        done.and(freed)
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
        let handle = st.slots.insert(Entry {
            size,
            align,
            label: label.to_string(),
            site: Site::Device(a),
            pinned: false,
            touched,
            resolved_at: Instant::now(),
            leased: true,
            last_use: Ticket::DONE,
        });
        Ok(Allocation {
            handle,
            range: a.range,
        })
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let e = st.slots.get_for_remove(handle)?;
        if let Site::Device(a) = &e.site {
            self.inner.free_after(a.handle, ticket.max(e.last_use))?;
        }
        let e = st.slots.remove(handle)?;
        if matches!(e.site, Site::Host(_)) {
            st.stats.spilled_now -= 1;
        }
        Ok(())
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        let mut st = self.lock();
        let e = st.slots.get_for_remove(handle)?;
        if let Site::Device(a) = &e.site {
            self.inner.cancel(a.handle)?;
        }
        let e = st.slots.remove(handle)?;
        if matches!(e.site, Site::Host(_)) {
            st.stats.spilled_now -= 1;
        }
        Ok(())
    }

    /// Where the bytes are now; a spilled allocation is brought back first (see the module doc).
    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let (size, align, label) = {
            let mut st = self.lock();
            st.clock += 1;
            let clock = st.clock;
            let e = st.slots.get_mut(handle)?;
            e.touched = clock;
            e.resolved_at = Instant::now();
            e.leased = true;
            match &e.site {
                Site::Device(a) => return self.inner.resolve(a.handle),
                Site::Host(_) => (e.size, e.align, e.label.clone()),
            }
        };
        let a = self.allocate_spilling(size, align, &label, Some(handle))?;
        let mut st = self.lock();
        let e = match st.slots.get_mut(handle) {
            Ok(e) => e,
            Err(err) => {
                self.inner.cancel(a.handle)?;
                return Err(err);
            }
        };
        let Site::Host(bytes) = &e.site else {
            // Another thread brought it back meanwhile.
            let Site::Device(cur) = e.site else {
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
        e.site = Site::Device(a);
        e.resolved_at = Instant::now();
        st.stats.restores += 1;
        st.stats.bytes_in += n;
        st.stats.spilled_now -= 1;
        Ok(a.range)
    }

    fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let e = st.slots.get_mut(handle)?;
        e.last_use = e.last_use.max(ticket);
        e.leased = false;
        match &e.site {
            Site::Device(a) => self.inner.mark_used(a.handle, ticket),
            Site::Host(_) => Ok(()),
        }
    }

    fn last_use(&self, handle: Handle) -> Result<Ticket> {
        let st = self.lock();
        let e = st.slots.get(handle)?;
        match &e.site {
            Site::Device(a) => Ok(e.last_use.max(self.inner.last_use(a.handle)?)),
            Site::Host(_) => Ok(e.last_use),
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
        LiveAllocation::all_in(&st.slots, |e| (&e.label, e.size))
    }

    fn set_listener(&self, listener: Option<Arc<dyn PoolListener>>) {
        self.inner.set_listener(listener);
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner.check_invariants()?;
        let st = self.lock();
        let host = st
            .slots
            .iter()
            .filter(|e| matches!(e.site, Site::Host(_)))
            .count();
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
mod tests;
