//! The compute stream's waits for the copy stream, timed on the device
//! ([`tensormem_contract::TransferLanes::transfer_stall`]).
//!
//! `compute_after` enqueues, on the compute stream, a timing event, the `cuStreamWaitEvent` on
//! the copy stream, and a second timing event (`Timeline::join_from_timed`). The first fires
//! once the compute stream's earlier work is done, the second once the wait let it go on, so
//! `cuEventElapsedTime` between them is the time the compute stream was held by the transfer
//! lane. Pairs are read in order, once their second event has passed, whenever the stall is
//! asked for or another wait is timed: the host never waits on a timing event.
//!
//! The timing events are created without `CU_EVENT_DISABLE_TIMING` (unlike the timeline's
//! events) and without `BLOCKING_SYNC`: nobody synchronises on them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tensormem_contract::Result;

use crate::timeline::{Event, elapsed_ms, lock, timing_event};

/// Completed pairs kept for reuse, so that steady state creates no events.
const SPARE_PAIRS: usize = 16;

/// The timed waits not yet read, and the total of those read.
#[derive(Debug, Default)]
pub(crate) struct StallTimer {
    /// Timed waits in stream order: (before, after).
    pending: Mutex<VecDeque<(Event, Event)>>,
    spare: Mutex<Vec<(Event, Event)>>,
    stalled_ns: AtomicU64,
}

impl StallTimer {
    /// A pair of timing events for the next wait. The context must be current.
    ///
    /// # Errors
    /// A mapped driver error from `cuEventCreate`.
    pub(crate) fn pair(&self) -> Result<(Event, Event)> {
        if let Some(pair) = lock(&self.spare).pop() {
            return Ok(pair);
        }
        Ok((timing_event()?, timing_event()?))
    }

    /// Keeps a pair whose wait was enqueued, to be read once it has passed.
    pub(crate) fn timed(&self, pair: (Event, Event)) {
        lock(&self.pending).push_back(pair);
    }

    /// Gives back a pair whose wait was never enqueued.
    pub(crate) fn unused(&self, pair: (Event, Event)) {
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_PAIRS {
            spare.push(pair);
        }
    }

    /// Adds the waits that have passed to the total, in order, stopping at the first still
    /// pending. Never blocks. The context must be current.
    ///
    /// # Errors
    /// A mapped driver error other than "not ready" (a lost device).
    pub(crate) fn settle(&self) -> Result<()> {
        loop {
            let mut pending = lock(&self.pending);
            let Some((before, after)) = pending.front() else {
                return Ok(());
            };
            let Some(ms) = elapsed_ms(before, after)? else {
                return Ok(());
            };
            let ns = (f64::from(ms.max(0.0)) * 1e6) as u64;
            self.stalled_ns.fetch_add(ns, Ordering::Relaxed);
            if let Some(pair) = pending.pop_front() {
                drop(pending);
                self.unused(pair);
            }
        }
    }

    /// The total of the waits read so far.
    pub(crate) fn stalled(&self) -> Duration {
        Duration::from_nanos(self.stalled_ns.load(Ordering::Relaxed))
    }
}
