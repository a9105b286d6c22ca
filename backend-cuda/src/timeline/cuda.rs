//! The CUDA side of the timeline: raw events with blocking synchronisation on the backend's
//! stream, and the joins with other streams.
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

use std::ptr;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaStream, DriverError};
use tensormem_contract::{Result, Ticket};

use super::{EventOps, Timeline, lock};
use crate::error::map_driver_err;

/// Flags of every timeline event: waits sleep in the driver instead of spinning a core
/// (`BLOCKING_SYNC`), and record/query skip timestamps (`DISABLE_TIMING`).
pub(crate) const EVENT_FLAGS: u32 = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
    | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;

/// An event with timing, for `cuEventElapsedTime` (`crate::stall`). The context must be
/// current.
///
/// # Errors
/// A mapped driver error.
pub(crate) fn timing_event() -> Result<Event> {
    let mut ev: sys::CUevent = ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as u32;
    // SAFETY: `ev` is valid for writes; the caller made the context current.
    unsafe { sys::cuEventCreate(&mut ev, flags) }
        .result()
        .map_err(|e| map_driver_err("cuEventCreate (timing)", e))?;
    Ok(Event(ev))
}

/// Milliseconds from `start` to `end` (two [`timing_event`]s recorded on one stream), or `None`
/// while `end` has not passed. Never blocks.
///
/// # Errors
/// A mapped driver error other than "not ready".
pub(crate) fn elapsed_ms(start: &Event, end: &Event) -> Result<Option<f32>> {
    // SAFETY: both events are live timing events recorded on one stream (cudarc picks
    // `cuEventElapsedTime` or its CUDA 13 `_v2` by the pinned API version).
    match unsafe { cudarc::driver::result::event::elapsed(start.0, end.0) } {
        Ok(ms) => Ok(Some(ms)),
        Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(None),
        Err(e) => Err(map_driver_err("cuEventElapsedTime", e)),
    }
}

/// A `CUevent`, destroyed on drop.
#[derive(Debug)]
pub(crate) struct Event(sys::CUevent);

// SAFETY: a CUevent handle may be used from any thread; the driver synchronises event calls.
unsafe impl Send for Event {}
// SAFETY: as above; the handle itself is never mutated.
unsafe impl Sync for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuEventCreate and is destroyed once; the driver defers the
        // release of an event still pending on a stream.
        let _ = unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// The backend's stream as the timeline's [`EventOps`].
#[derive(Debug)]
pub(crate) struct CudaEvents {
    stream: Arc<CudaStream>,
}

impl CudaEvents {
    /// Events on `stream`.
    pub(crate) fn new(stream: Arc<CudaStream>) -> Self {
        CudaEvents { stream }
    }

    /// The stream every submission goes to.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn create_raw(&self) -> Result<Event> {
        let mut ev: sys::CUevent = ptr::null_mut();
        // SAFETY: `ev` is valid for writes; the caller made the stream's context current.
        unsafe { sys::cuEventCreate(&mut ev, EVENT_FLAGS) }
            .result()
            .map_err(|e| map_driver_err("cuEventCreate", e))?;
        Ok(Event(ev))
    }
}

impl EventOps for CudaEvents {
    type Event = Event;

    fn create(&self) -> Result<Event> {
        self.create_raw()
    }

    fn record(&self, event: &Event) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { sys::cuEventRecord(event.0, self.stream.cu_stream()) }
            .result()
            .map_err(|e| map_driver_err("cuEventRecord", e))
    }

    fn query(&self, event: &Event) -> Result<bool> {
        // SAFETY: the event is live; cuEventQuery does not block.
        match unsafe { sys::cuEventQuery(event.0) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(map_driver_err("cuEventQuery", DriverError(code))),
        }
    }

    fn synchronize(&self, event: &Event) -> Result<()> {
        // SAFETY: the event is live (the caller holds an Arc to it).
        unsafe { sys::cuEventSynchronize(event.0) }
            .result()
            .map_err(|e| map_driver_err("cuEventSynchronize", e))
    }
}

impl Timeline<CudaEvents> {
    /// The stream every submission goes to.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.ops().stream()
    }

    /// Makes this timeline's stream wait for the work enqueued on `other` so far and returns the
    /// ticket of that wait (see the module doc).
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn join_from(&self, other: &CudaStream) -> Result<Ticket> {
        self.join(other, None)
    }

    /// [`Timeline::join_from`] between two timing events recorded on this stream, right before
    /// and right after the wait (`crate::stall`).
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn join_from_timed(
        &self,
        other: &CudaStream,
        timing: (&Event, &Event),
    ) -> Result<Ticket> {
        self.join(other, Some(timing))
    }

    /// The wait behind both joins, with `timing` events around it when given.
    fn join(&self, other: &CudaStream, timing: Option<(&Event, &Event)>) -> Result<Ticket> {
        let event = self.ops().create_raw()?;
        // SAFETY: both handles are live.
        unsafe { sys::cuEventRecord(event.0, other.cu_stream()) }
            .result()
            .map_err(|e| map_driver_err("cuEventRecord", e))?;
        let stream = self.stream().cu_stream();
        let record = |timer: Option<&Event>| match timer {
            // SAFETY: both handles are live.
            Some(t) => unsafe { sys::cuEventRecord(t.0, stream) }
                .result()
                .map_err(|e| map_driver_err("cuEventRecord (timing)", e)),
            None => Ok(()),
        };
        self.submit(|| {
            record(timing.map(|t| t.0))?;
            // SAFETY: both handles are live; cuStreamWaitEvent captures the event's current
            // state, so `event` may be destroyed when this returns.
            unsafe { sys::cuStreamWaitEvent(stream, event.0, 0) }
                .result()
                .map_err(|e| map_driver_err("cuStreamWaitEvent", e))?;
            record(timing.map(|t| t.1))
        })
    }

    /// Records an event after everything submitted so far and returns it, for another stream
    /// to wait for (a peer copy's source side). This timeline's context must be current.
    ///
    /// # Errors
    /// A lost device; a mapped driver error.
    pub(crate) fn mark(&self) -> Result<Event> {
        self.health().check()?;
        let event = self.ops().create_raw()?;
        let _order = lock(&self.submit);
        self.health().remember_loss(self.ops().record(&event))?;
        Ok(event)
    }

    /// Enqueues `enqueue` after `after` (an event of any stream, any context) and returns its
    /// ticket and an event recorded right after it, for the other stream to wait for. This
    /// timeline's context must be current.
    ///
    /// # Errors
    /// A lost device; whatever `enqueue` returns; a mapped driver error.
    pub(crate) fn submit_after(
        &self,
        after: &Event,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<(Ticket, Event)> {
        let done = self.ops().create_raw()?;
        let stream = self.stream().cu_stream();
        let ticket = self.submit(|| {
            // SAFETY: both handles are live; the wait captures the event's current state.
            unsafe { sys::cuStreamWaitEvent(stream, after.0, 0) }
                .result()
                .map_err(|e| map_driver_err("cuStreamWaitEvent", e))?;
            enqueue()?;
            self.ops().record(&done)
        })?;
        Ok((ticket, done))
    }

    /// Makes this timeline's stream wait for `event` (of any stream, any context) and returns
    /// the ticket of that wait.
    ///
    /// # Errors
    /// A lost device; a mapped driver error.
    pub(crate) fn wait_for(&self, event: &Event) -> Result<Ticket> {
        let stream = self.stream().cu_stream();
        self.submit(|| {
            // SAFETY: both handles are live; the wait captures the event's current state.
            unsafe { sys::cuStreamWaitEvent(stream, event.0, 0) }
                .result()
                .map_err(|e| map_driver_err("cuStreamWaitEvent", e))
        })
    }

    /// Makes `other` wait for everything submitted to this timeline so far.
    ///
    /// # Errors
    /// A mapped driver error.
    pub(crate) fn join_into(&self, other: &CudaStream) -> Result<()> {
        self.health().check()?;
        let event = self.ops().create_raw()?;
        {
            // Under the submit lock, so the event follows every ticket issued so far.
            let _order = lock(&self.submit);
            self.ops().record(&event)?;
        }
        // SAFETY: both handles are live; the wait captures the event's state.
        let waited = unsafe { sys::cuStreamWaitEvent(other.cu_stream(), event.0, 0) }
            .result()
            .map_err(|e: DriverError| map_driver_err("cuStreamWaitEvent", e));
        self.health().remember_loss(waited)
    }
}
