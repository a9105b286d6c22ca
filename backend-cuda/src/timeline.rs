//! Tickets on CUDA: events recorded on the backend's stream, plus cross-stream joins.
//!
//! Every submission (copy, fill, kernel, queued write) is enqueued on the one stream under the
//! timeline lock and gets the next ticket, so ticket order is stream order. Events are recorded
//! lazily: `flush`, `completed` and `wait` record one event covering every ticket issued since the
//! last record (bookkeeping in [`ring::TicketRing`]). `completed` polls events with
//! `cuEventQuery`; `wait` blocks in `cuEventSynchronize` *without* holding the lock, so other
//! threads keep submitting while one waits.
//!
//! # Other streams (PyTorch's `record_stream`)
//!
//! The contract has one logical queue. An application that also uses a block on its own stream
//! joins the two with [`Timeline::join_from`]: it records an event on the other stream, makes the
//! backend's stream wait for it and issues a ticket for that wait. That ticket completes only after
//! the other stream's work up to the join has finished, so deferring a free to it (the pools'
//! ordinary rule) is exactly `record_stream` + free. [`Timeline::join_into`] is the other
//! direction: the application's stream waits for everything submitted here so far (hand-off of
//! outputs without a host sync).

mod ring;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::sys;
use cudarc::driver::{CudaEvent, CudaStream};
use tensormem::{Result, Ticket};

use crate::error::map_driver_err;
use ring::TicketRing;

/// Completed events kept for reuse. Each flush/wait/poll point needs one event in flight; 64
/// covers deep pipelines without creating events in steady state.
const SPARE_EVENTS: usize = 64;

/// The backend's stream and its ticket ring.
#[derive(Debug)]
pub(crate) struct Timeline {
    stream: Arc<CudaStream>,
    ring: Mutex<TicketRing<Arc<CudaEvent>>>,
}

/// Locks a mutex, recovering the data after a panic elsewhere: the ring's invariants hold
/// between method calls, and a backend must not panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Timeline {
    /// A timeline on `stream` with nothing issued.
    pub(crate) fn new(stream: Arc<CudaStream>) -> Self {
        Timeline {
            stream,
            ring: Mutex::new(TicketRing::new(SPARE_EVENTS)),
        }
    }

    /// The stream every submission goes to.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Enqueues work with `enqueue(stream)` and returns its ticket. The lock makes the enqueue
    /// and the ticket one step, so tickets follow stream order across threads.
    ///
    /// # Errors
    /// Whatever `enqueue` returns; no ticket is issued then.
    pub(crate) fn submit(
        &self,
        enqueue: impl FnOnce(sys::CUstream) -> Result<()>,
    ) -> Result<Ticket> {
        let mut ring = lock(&self.ring);
        enqueue(self.stream.cu_stream())?;
        Ok(ring.issue())
    }

    fn record(&self, ring: &mut TicketRing<Arc<CudaEvent>>) -> Result<()> {
        let Some(ticket) = ring.unrecorded() else {
            return Ok(());
        };
        let event = match ring.take_spare() {
            Some(e) => e,
            None => Arc::new(
                self.stream
                    .context()
                    .new_event(None)
                    .map_err(|e| map_driver_err("cuEventCreate", e))?,
            ),
        };
        event
            .record(&self.stream)
            .map_err(|e| map_driver_err("cuEventRecord", e))?;
        ring.push_recorded(ticket, event);
        Ok(())
    }

    /// Records an event covering every issued ticket; returns the last issued ticket.
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn flush(&self) -> Result<Ticket> {
        let mut ring = lock(&self.ring);
        self.record(&mut ring)?;
        Ok(ring.last_issued())
    }

    /// The highest completed ticket, polling events with `cuEventQuery` (non-blocking).
    ///
    /// # Errors
    /// [`tensormem::Error::DeviceLost`] after a sticky error, other mapped driver errors.
    pub(crate) fn completed(&self) -> Result<Ticket> {
        let mut ring = lock(&self.ring);
        self.record(&mut ring)?;
        ring.poll(|e| match e.try_is_complete() {
            Ok(done) => Ok(done),
            Err(err) => Err(map_driver_err("cuEventQuery", err)),
        })
    }

    /// Blocks until `ticket` has finished.
    ///
    /// # Errors
    /// [`tensormem::Error::InvalidArgument`] for a ticket never issued, a lost device, or other
    /// mapped driver errors.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        let (covering, event) = {
            let mut ring = lock(&self.ring);
            ring.check_issued(ticket)?;
            if ticket <= ring.completed() {
                return Ok(());
            }
            self.record(&mut ring)?;
            match ring.covering(ticket) {
                Some((t, e)) => (t, Arc::clone(e)),
                // Unreachable: `ticket` is issued, not complete, and now recorded.
                None => return Ok(()),
            }
        };
        // The event may be retired and re-recorded for later work while we wait: that only makes
        // the wait longer, never shorter, and the Arc keeps it alive.
        event
            .synchronize()
            .map_err(|e| map_driver_err("cuEventSynchronize", e))?;
        lock(&self.ring).retire_through(covering);
        Ok(())
    }

    /// Makes this timeline's stream wait for the work enqueued on `other` so far and returns the
    /// ticket of that wait (see the module doc).
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn join_from(&self, other: &CudaStream) -> Result<Ticket> {
        let event = other
            .record_event(None)
            .map_err(|e| map_driver_err("cuEventRecord", e))?;
        self.submit(|stream| {
            // SAFETY: both handles are live; cuStreamWaitEvent captures the event's current
            // state, so `event` may be destroyed when this returns.
            unsafe { sys::cuStreamWaitEvent(stream, event.cu_event(), 0) }
                .result()
                .map_err(|e| map_driver_err("cuStreamWaitEvent", e))
        })
    }

    /// Makes `other` wait for everything submitted to this timeline so far.
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn join_into(&self, other: &CudaStream) -> Result<()> {
        let event = {
            let _ring = lock(&self.ring);
            self.stream
                .record_event(None)
                .map_err(|e| map_driver_err("cuEventRecord", e))?
        };
        other
            .wait(&event)
            .map_err(|e| map_driver_err("cuStreamWaitEvent", e))
    }
}
