//! A lane's worker thread: a plain thread, or one thread of the lane's own rayon pool.
//!
//! The compute lane's ops spread their loops over rayon (`par_iter` in the host kernels). From a
//! plain thread every such loop is injected into the global pool and the worker sleeps until the
//! pool's threads finish it: two hand-offs per op, most of an op's cost when it is small (a decode
//! step of a small model runs hundreds of sub-millisecond ops). Run on a thread of a pool, the
//! worker works on its own loops and the pool's other threads steal from them: one hand-off at
//! most, and none when the loop is too small to split. Each host backend's compute lane has its
//! own pool of as many threads as the global pool (one of them the worker), so backends and the
//! global pool's other users (the planner's threads) never wait on one another's jobs.
//!
//! A pool that spans every CPU pins its threads one per CPU ([`affinity`]).
//!
//! Joining: a pool thread has no join handle, so the worker holds the sending end of a channel
//! that it drops on exit by any path (return or unwind); [`WorkerThread::join`] waits for that.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::warm::Warmth;
use super::{NAME, affinity};
use crate::{Error, Result};

/// A running worker (see the module doc).
pub(super) enum WorkerThread {
    Plain(JoinHandle<()>),
    Pooled {
        /// Dropped after the worker exited: the pool's threads then end.
        _pool: rayon::ThreadPool,
        /// Disconnected when the worker exits.
        exited: mpsc::Receiver<()>,
    },
}

fn spawn_error(api: &'static str, message: String) -> Error {
    Error::Backend {
        backend: NAME,
        api,
        code: 0,
        message,
    }
}

impl WorkerThread {
    /// Runs `work` on a new thread `name`: a plain one when `pool_threads` is 0, else one thread
    /// of a new pool of `pool_threads` threads (named `name-0`, `name-1`, …). `work` gets the
    /// [`Warmth`] that keeps the pool's other threads spinning while it runs commands.
    ///
    /// # Errors
    /// [`Error::Backend`] if a thread cannot be spawned.
    pub(super) fn spawn(
        name: &str,
        pool_threads: usize,
        work: impl FnOnce(Warmth) + Send + 'static,
    ) -> Result<Self> {
        if pool_threads == 0 {
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || work(Warmth::new(0)))
                .map_err(|e| spawn_error("std::thread::spawn", e.to_string()))?;
            return Ok(WorkerThread::Plain(handle));
        }
        let prefix = name.to_string();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(pool_threads)
            .thread_name(move |i| format!("{prefix}-{i}"))
            // The worker catches every op's panic; one escaping it ends the worker (its timeline
            // is marked dead) and must not abort the process, as rayon's default handler would.
            .panic_handler(|_| {})
            .start_handler(move |i| affinity::pin(i, pool_threads))
            .build()
            .map_err(|e| spawn_error("rayon::ThreadPoolBuilder::build", e.to_string()))?;
        let (alive, exited) = mpsc::channel::<()>();
        pool.spawn(move || {
            let _alive = alive;
            work(Warmth::new(pool_threads - 1));
        });
        Ok(WorkerThread::Pooled {
            _pool: pool,
            exited,
        })
    }

    /// Waits until the worker has exited.
    pub(super) fn join(self) {
        match self {
            WorkerThread::Plain(handle) => {
                let _ = handle.join();
            }
            WorkerThread::Pooled { exited, .. } => {
                // Only ever disconnected (the worker never sends): returns once it exited.
                let _ = exited.recv();
            }
        }
    }
}
