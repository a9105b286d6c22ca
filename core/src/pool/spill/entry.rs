//! One allocation of a [`SpillPool`](super::SpillPool) as a state machine: where its bytes are
//! and what holds it in place (leases, pins, queued work). The rules that decide whether it may
//! move are pure functions of the entry, so the pool and its exhaustive-interleaving test
//! (`spill/model_tests.rs`) run the same code.
//!
//! An allocation moves to host memory only when it is *movable*: on the device, with no pin, no
//! lease and no recorded work that has not completed. A lease is counted: every `resolve` (and
//! the `allocate` that made it) adds one, every `release` ends one, and nothing ends a lease on
//! its own. A range in a caller's hands therefore stays where it is however long the caller
//! takes, and nested or concurrent users of one allocation each hold their own lease. Pins are
//! counted the same way, and an unpin without a pin is refused.

use crate::backend::Ticket;
use crate::{Error, Result};

/// Where an allocation's bytes are. `D` names a device range (the inner pool's allocation).
#[derive(Clone, Debug)]
pub(super) enum Site<D> {
    /// In device memory.
    Device(D),
    /// In host memory (the spilled bytes, padded to the copy alignment).
    Host(Vec<u8>),
}

/// Whether an allocation may be spilled now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mobility {
    /// It may move now.
    Movable,
    /// Leased or in flight: it may become movable later.
    Busy,
    /// Pinned or already in host memory: waiting does not help.
    Fixed,
}

/// The state of one allocation.
#[derive(Clone, Debug)]
pub(super) struct Entry<D> {
    pub(super) site: Site<D>,
    /// Leases not yet released (module doc).
    leases: u32,
    /// Pins not yet unpinned.
    pins: u32,
    /// Logical time of the last lease (LRU order).
    pub(super) touched: u64,
    /// Latest ticket recorded against it.
    pub(super) last_use: Ticket,
}

impl<D: Copy> Entry<D> {
    /// A new device allocation, leased once to the caller of `allocate`.
    pub(super) fn allocated(d: D, clock: u64) -> Self {
        Entry {
            site: Site::Device(d),
            leases: 1,
            pins: 0,
            touched: clock,
            last_use: Ticket::DONE,
        }
    }

    /// Begins a lease (a `resolve`).
    pub(super) fn lease(&mut self, clock: u64) -> Result<()> {
        self.leases = one_more(self.leases, "leases")?;
        self.touched = clock;
        Ok(())
    }

    /// Ends a lease; more releases than leases are ignored.
    pub(super) fn release(&mut self) {
        self.leases = self.leases.saturating_sub(1);
    }

    /// Adds a pin.
    pub(super) fn pin(&mut self) -> Result<()> {
        self.pins = one_more(self.pins, "pins")?;
        Ok(())
    }

    /// Removes a pin.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the allocation is not pinned.
    pub(super) fn unpin(&mut self) -> Result<()> {
        if self.pins == 0 {
            return Err(Error::InvalidArgument(
                "spill pool: unpin of an allocation that is not pinned".into(),
            ));
        }
        self.pins -= 1;
        Ok(())
    }

    /// Records work that uses the allocation.
    pub(super) fn record_use(&mut self, ticket: Ticket) {
        self.last_use = self.last_use.max(ticket);
    }

    /// Whether it may be spilled now: `done` is the backend's completed ticket, `inner_use` the
    /// latest use the pool below recorded.
    pub(super) fn mobility(&self, done: Ticket, inner_use: Ticket) -> Mobility {
        match self.site {
            Site::Host(_) => Mobility::Fixed,
            Site::Device(_) if self.pins > 0 => Mobility::Fixed,
            Site::Device(_) if self.leases > 0 || self.last_use.max(inner_use) > done => {
                Mobility::Busy
            }
            Site::Device(_) => Mobility::Movable,
        }
    }

    /// The device range, if the bytes are there.
    pub(super) fn device(&self) -> Option<D> {
        match self.site {
            Site::Device(d) => Some(d),
            Site::Host(_) => None,
        }
    }

    /// Its bytes are now `bytes` in host memory; returns the device range to free.
    ///
    /// # Errors
    /// [`Error::InvariantViolated`] unless the entry was movable (the caller checked it under the
    /// same lock).
    pub(super) fn spilled(&mut self, bytes: Vec<u8>, done: Ticket, inner_use: Ticket) -> Result<D> {
        let Some(d) = self.device() else {
            return Err(Error::invariant("a spill victim is on the device", "host"));
        };
        if self.mobility(done, inner_use) != Mobility::Movable {
            return Err(Error::invariant("a spill victim is movable", "held"));
        }
        self.site = Site::Host(bytes);
        Ok(d)
    }

    /// The leases and pins it holds now.
    #[cfg(test)]
    pub(super) fn holds(&self) -> (u32, u32) {
        (self.leases, self.pins)
    }

    /// Its bytes are back on the device, in `d`.
    pub(super) fn restored(&mut self, d: D) {
        self.site = Site::Device(d);
    }
}

/// `count + 1`, or the overflow of the allocation's `what` counter.
fn one_more(count: u32, what: &str) -> Result<u32> {
    count
        .checked_add(1)
        .ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("spill pool: {what} of one allocation"),
            limit_name: "u32",
        })
}
