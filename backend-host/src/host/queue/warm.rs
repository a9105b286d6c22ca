//! Keeps a compute pool's other threads awake while its worker is busy.
//!
//! A model's ops come one after another, each spreading its loops over the pool's threads for a
//! few microseconds to a millisecond. Left idle between two ops, rayon's threads yield a few
//! times and then sleep on a futex, and the next op's loop wakes them again: in a virtual machine
//! a wake costs tens of microseconds, about as much as a small op's work. So while commands keep
//! coming, every other thread of the pool runs a *spinner*: a job that takes the pool's pending
//! work ([`rayon::yield_now`]) as soon as it appears and otherwise spins, as ONNX Runtime's and
//! OpenMP's pools spin between parallel regions.
//!
//! Spinning costs a CPU, so it ends: a spinner returns once no command has started for
//! [`SPIN_FOR`], and its thread falls back to rayon's sleep. The worker calls [`Warmth::touch`]
//! before each command; that records the time and starts spinners up to one per other thread.
//! Dropping the [`Warmth`] (the worker exiting, by return or unwind) stops them at once, so the
//! pool's threads can end. A spinner that quits just as a command starts leaves that command to
//! rayon's ordinary wake: only speed, never a result, depends on the spinners.
//!
//! Cost: one clock read and one atomic store per command; a spinner's idle step is one steal attempt and a pause
//! instruction, with a clock read every [`CLOCK_EVERY`] steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long spinners wait for the next command before their threads may sleep.
const SPIN_FOR: Duration = Duration::from_millis(2);

/// Idle steps between two clock reads of a spinner.
const CLOCK_EVERY: u32 = 64;

/// The worker's handle on its pool's spinners (module doc).
pub(super) struct Warmth {
    state: Arc<State>,
}

struct State {
    /// Spinners wanted: the pool's threads other than the worker's (0 outside a pool).
    helpers: usize,
    /// Spinners running or spawned.
    running: AtomicUsize,
    /// When the last command started, in nanoseconds from `epoch`.
    last: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
}

impl State {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether no command started for [`SPIN_FOR`].
    fn cold(&self) -> bool {
        let idle = self.now().saturating_sub(self.last.load(Ordering::Relaxed));
        idle > SPIN_FOR.as_nanos() as u64
    }
}

impl Warmth {
    /// A handle for a worker whose pool has `helpers` other threads (0: a plain thread, and
    /// [`Warmth::touch`] does nothing).
    pub(super) fn new(helpers: usize) -> Self {
        Warmth {
            state: Arc::new(State {
                helpers,
                running: AtomicUsize::new(0),
                last: AtomicU64::new(0),
                epoch: Instant::now(),
                stop: AtomicBool::new(false),
            }),
        }
    }

    /// A command is about to run: keeps (or starts) one spinner per other thread of the pool.
    /// Called on the worker's thread, inside its pool.
    pub(super) fn touch(&self) {
        let s = &self.state;
        if s.helpers == 0 {
            return;
        }
        s.last.store(s.now(), Ordering::Relaxed);
        while s.running.load(Ordering::Relaxed) < s.helpers {
            s.running.fetch_add(1, Ordering::Relaxed);
            let state = self.state.clone();
            rayon::spawn(move || spin(&state));
        }
    }
}

impl Drop for Warmth {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
    }
}

/// A spinner: runs the pool's pending work until the worker has been idle for [`SPIN_FOR`] or
/// its [`Warmth`] is dropped.
fn spin(s: &State) {
    let mut idle = 0u32;
    while !s.stop.load(Ordering::Relaxed) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle = 0,
            Some(rayon::Yield::Idle) => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(CLOCK_EVERY) && s.cold() {
                    break;
                }
                std::hint::spin_loop();
            }
            // Not on a pool thread: nothing to take.
            None => break,
        }
    }
    s.running.fetch_sub(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests;
