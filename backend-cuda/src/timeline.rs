//! Tickets on CUDA: events recorded on the backend's stream, plus cross-stream joins.
//!
//! Every submission (copy, fill, kernel, queued write) is enqueued on the one stream and gets the
//! next ticket, so ticket order is stream order. Events are recorded lazily: `flush`,
//! `completed` and `wait` record one event covering every ticket issued since the last record
//! (bookkeeping in [`ring::TicketRing`]).
//!
//! # Locks
//!
//! Two locks, so that `completed` never blocks:
//!
//! * the **submit lock** orders enqueues with tickets and event records. It is held across driver
//!   calls that may block (a launch into a full queue, a pageable copy), so only `submit`,
//!   `flush` and `wait` take it blocking; `completed` only *tries* it and, when a submission is in
//!   progress, polls the events already recorded instead of recording a new one;
//! * the **ring lock** guards the bookkeeping alone and is held only across `cuEventQuery`, which
//!   does not wait for the GPU. `wait` blocks in `cuEventSynchronize` holding neither lock.
//!
//! Events are created with `CU_EVENT_BLOCKING_SYNC`, so a waiting thread sleeps in the driver
//! instead of spinning a core (and `CU_EVENT_DISABLE_TIMING`, which makes record and query cheap).
//!
//! The first sticky error any call sees is remembered ([`Health`]) and every later call fails with
//! it, including a wait on a ticket already retired.
//!
//! The rules are generic over [`EventOps`], so `timeline/tests.rs` checks them with fake events and
//! a fake stream; `timeline/cuda.rs` is the CUDA implementation (and the cross-stream joins).

mod cuda;
mod ring;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use std::time::{Duration, Instant};

use tensormem_contract::{Error, Result, Ticket};

use crate::health::Health;
use ring::TicketRing;

pub(crate) use cuda::{CudaEvents, Event, elapsed_ms, timing_event};

/// Completed events kept for reuse. Each flush/wait/poll point needs one event in flight; 64
/// covers deep pipelines without creating events in steady state.
const SPARE_EVENTS: usize = 64;

/// Locks a mutex, recovering the data after a panic elsewhere: the ring's invariants hold
/// between method calls, and a backend must not panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The driver calls a timeline needs: events recorded on one stream.
pub(crate) trait EventOps {
    /// One event.
    type Event;
    /// Creates an event.
    fn create(&self) -> Result<Self::Event>;
    /// Records `event` on the stream after everything enqueued so far.
    fn record(&self, event: &Self::Event) -> Result<()>;
    /// Whether the stream has passed `event` (must not block).
    fn query(&self, event: &Self::Event) -> Result<bool>;
    /// Blocks until the stream has passed `event`.
    fn synchronize(&self, event: &Self::Event) -> Result<()>;
}

/// The backend's stream and its ticket ring.
#[derive(Debug)]
pub(crate) struct Timeline<D: EventOps> {
    ops: D,
    /// Orders enqueues, ticket issue and event records (see the module doc).
    submit: Mutex<()>,
    ring: Mutex<TicketRing<Arc<D::Event>>>,
    health: Health,
}

impl<D: EventOps> Timeline<D> {
    /// A timeline over `ops` with nothing issued.
    pub(crate) fn new(ops: D) -> Self {
        Timeline {
            ops,
            submit: Mutex::new(()),
            ring: Mutex::new(TicketRing::new(SPARE_EVENTS)),
            health: Health::default(),
        }
    }

    /// The driver side (the stream).
    pub(crate) fn ops(&self) -> &D {
        &self.ops
    }

    /// The lost-device latch shared with the backend's other entry points.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// Enqueues work with `enqueue()` and returns its ticket. The submit lock makes the enqueue
    /// and the ticket one step, so tickets follow stream order across threads.
    ///
    /// # Errors
    /// A remembered lost device (then `enqueue` is not called); whatever `enqueue` returns (no
    /// ticket is issued then).
    pub(crate) fn submit(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<Ticket> {
        self.health.check()?;
        let _order = lock(&self.submit);
        self.health.remember_loss(enqueue())?;
        Ok(lock(&self.ring).issue())
    }

    /// Records one event covering every issued ticket not yet covered. The caller holds the
    /// submit lock, so nothing is issued or recorded meanwhile; the ring lock is not held across
    /// the driver calls.
    fn record(&self, _order: &MutexGuard<'_, ()>) -> Result<()> {
        let (ticket, spare) = {
            let mut ring = lock(&self.ring);
            match ring.unrecorded() {
                None => return Ok(()),
                Some(t) => (t, ring.take_spare()),
            }
        };
        let event = match spare {
            Some(e) => e,
            None => Arc::new(self.ops.create()?),
        };
        self.health.remember_loss(self.ops.record(&event))?;
        lock(&self.ring).push_recorded(ticket, event);
        Ok(())
    }

    /// The highest ticket already known complete, without asking the driver.
    pub(crate) fn known_completed(&self) -> Ticket {
        lock(&self.ring).completed()
    }

    /// Records an event covering every issued ticket; returns the last issued ticket.
    ///
    /// # Errors
    /// A lost device; a mapped driver error.
    pub(crate) fn flush(&self) -> Result<Ticket> {
        self.health.check()?;
        let order = lock(&self.submit);
        self.record(&order)?;
        Ok(lock(&self.ring).last_issued())
    }

    /// The highest completed ticket, polling recorded events (non-blocking: see the module doc).
    ///
    /// # Errors
    /// A lost device, now or remembered; other mapped driver errors.
    pub(crate) fn completed(&self) -> Result<Ticket> {
        self.health.check()?;
        match self.submit.try_lock() {
            Ok(order) => self.record(&order)?,
            Err(TryLockError::Poisoned(p)) => self.record(&p.into_inner())?,
            // A submission is in progress (perhaps blocked in the driver): poll what is recorded.
            Err(TryLockError::WouldBlock) => {}
        }
        let polled = lock(&self.ring).poll(|e| self.ops.query(e));
        self.health.remember_loss(polled)
    }

    /// Blocks until `ticket` has finished, for at most `timeout` (`None` or `Duration::MAX`: no
    /// limit). Without a limit the thread sleeps in `cuEventSynchronize`; with one it polls the
    /// event with exponential backoff (CUDA has no timed event wait), from 10 µs to 1 ms.
    ///
    /// # Errors
    /// [`tensormem_contract::Error::UnknownTicket`] for a ticket never issued; a lost device, now or
    /// remembered (also for a ticket that had completed before); [`Error::Timeout`] when the limit
    /// runs out; other mapped driver errors.
    pub(crate) fn wait(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        self.health.check()?;
        {
            let ring = lock(&self.ring);
            ring.check_issued(ticket)?;
            if ticket <= ring.completed() {
                return Ok(());
            }
        }
        if lock(&self.ring).covering(ticket).is_none() {
            let order = lock(&self.submit);
            self.record(&order)?;
        }
        let (covering, event) = match lock(&self.ring).covering(ticket) {
            Some((t, e)) => (t, Arc::clone(e)),
            // Retired by another thread meanwhile: complete.
            None => return Ok(()),
        };
        // The event may be retired and re-recorded for later work while we wait: that only makes
        // the wait longer, never shorter, and the Arc keeps it alive.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        match deadline {
            None => self.health.remember_loss(self.ops.synchronize(&event))?,
            Some(deadline) => self.poll_until(&event, deadline, ticket, timeout)?,
        }
        lock(&self.ring).retire_through(covering);
        Ok(())
    }

    /// Polls `event` until it has passed or `deadline` (the end of `timeout`) arrives.
    fn poll_until(
        &self,
        event: &D::Event,
        deadline: Instant,
        ticket: Ticket,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let mut pause = Duration::from_micros(10);
        while !self.health.remember_loss(self.ops.query(event))? {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    backend: crate::error::BACKEND,
                    what: format!("ticket {}", ticket.0),
                    timeout: timeout.unwrap_or_default(),
                });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
