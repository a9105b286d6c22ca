//! The host backend's lanes: each an ordered queue of commands run by its own worker thread (on
//! `wasm32`, inline), with a timeline of completed tickets.
//!
//! The compute lane and the transfer lane are two instances of [`Lane`]. A cross-lane wait is a
//! command ([`Command::After`]) whose worker blocks on the other lane's timeline until its ticket
//! completed: a device-side wait, the caller never blocks. It cannot deadlock: a wait names a
//! ticket already issued on the other lane, so the other lane's work it waits for was enqueued
//! before any work that waits for this one.
//!
//! Both workers may touch one block (an arena a kernel reads while the transfer lane copies into
//! another part of it): every command locks the blocks it touches in one global order (by
//! address), so two workers never deadlock on block locks. A copy into a block a kernel is using
//! waits for that kernel (the block's lock); copies between other blocks overlap it.

#[cfg(not(target_arch = "wasm32"))]
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(target_arch = "wasm32"))]
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::backend::{BlockRange, Ticket, TicketWakers};
use crate::ops::Op;
use crate::{Error, Result};

#[cfg(not(target_arch = "wasm32"))]
use super::NAME;
use super::lock;
use super::memory::HostMemory;

#[cfg(not(target_arch = "wasm32"))]
mod affinity;
mod dispatch;
#[cfg(not(target_arch = "wasm32"))]
mod thread;
#[cfg(not(target_arch = "wasm32"))]
mod warm;
use dispatch::dispatch;
#[cfg(not(target_arch = "wasm32"))]
use thread::WorkerThread;

pub(super) type BlockMem = Arc<Mutex<HostMemory>>;

/// One argument of a command: the block's memory (kept alive by the command even if the block is
/// freed meanwhile) and the range in it.
#[derive(Clone)]
pub(super) struct Arg {
    pub(super) mem: BlockMem,
    pub(super) offset: usize,
    pub(super) size: usize,
}

pub(super) enum Command {
    Copy(Arg, Arg),
    Fill(Arg),
    /// The op, its operands (inputs then outputs), and the number of inputs.
    Dispatch(Op, Vec<Arg>, usize),
    /// Wait until the other lane's timeline reached the ticket.
    After(Arc<Timeline>, u64),
    /// Fault injection: the worker panics ([`HostBackend::simulate_worker_panic`](super::HostBackend::simulate_worker_panic)).
    Panic,
    #[cfg(not(target_arch = "wasm32"))]
    Shutdown,
}

/// The commands both lanes run alike, built from checked ranges.
impl super::HostBackend {
    /// Copies `src` to `dst`.
    pub(super) fn copy_command(&self, src: BlockRange, dst: BlockRange) -> Result<Command> {
        self.check_alive()?;
        Ok(Command::Copy(
            self.arg(src, "copy source")?,
            self.arg(dst, "copy destination")?,
        ))
    }

    /// Zeroes `range`.
    pub(super) fn fill_command(&self, range: BlockRange) -> Result<Command> {
        Ok(Command::Fill(self.arg(range, "fill range")?))
    }
}

/// The last ticket finished, and the lowest ticket a blocked thread waits for (`u64::MAX`: none).
/// Finishing a ticket below every waiter's wakes no one: a run of many small ops costs its caller
/// one wake-up, not one per op.
struct Progress {
    done: u64,
    wanted: u64,
}

/// Progress of one lane's worker: the last ticket finished, plus a condvar to wait on it.
pub(super) struct Timeline {
    completed: Mutex<Progress>,
    cv: Condvar,
    /// First error the worker hit; reported by every later call (a "lost device").
    fault: Mutex<Option<String>>,
    /// Tasks awaiting a ticket; woken as their tickets complete, all at once on a fault.
    wakers: Mutex<TicketWakers>,
    /// The worker thread has exited: nothing will complete any more.
    stopped: AtomicBool,
    /// Nanoseconds this lane's worker spent in [`Command::After`] waits.
    waited_ns: AtomicU64,
}

impl Timeline {
    fn new() -> Self {
        Timeline {
            completed: Mutex::new(Progress {
                done: 0,
                wanted: u64::MAX,
            }),
            cv: Condvar::new(),
            fault: Mutex::new(None),
            wakers: Mutex::new(TicketWakers::default()),
            stopped: AtomicBool::new(false),
            waited_ns: AtomicU64::new(0),
        }
    }

    fn fail(&self, fault: String) {
        lock(&self.fault).get_or_insert(fault);
        // Under the progress lock, so a waiter between its check and its wait still sees it.
        let _progress = lock(&self.completed);
        self.cv.notify_all();
    }

    /// Records that `ticket` finished (with the command's failure, if any) and wakes its waiters:
    /// blocked ones through the condvar, awaiting tasks through their wakers (every task on a
    /// fault, so each sees the error).
    fn finish(&self, ticket: u64, result: std::result::Result<(), String>) {
        if let Err(e) = result {
            self.fail(e);
        }
        {
            let mut progress = lock(&self.completed);
            progress.done = ticket;
            if ticket >= progress.wanted {
                // Every waiter wakes; those still short of their ticket register it again.
                progress.wanted = u64::MAX;
                self.cv.notify_all();
            }
        }
        self.wake(Ticket(ticket));
    }

    /// Wakes the tasks awaiting tickets up to `done`, or every task once faulted or stopped.
    fn wake(&self, done: Ticket) {
        let woken = if self.dead() {
            lock(&self.wakers).take_all()
        } else {
            lock(&self.wakers).take_completed(done)
        };
        woken.into_iter().for_each(std::task::Waker::wake);
    }

    /// The lane's fault, or that its worker stopped.
    pub(super) fn failure(&self) -> Option<String> {
        if let Some(fault) = lock(&self.fault).clone() {
            return Some(format!("the worker failed: {fault}"));
        }
        self.stopped
            .load(Ordering::SeqCst)
            .then(|| "the worker thread has stopped".to_string())
    }

    fn dead(&self) -> bool {
        lock(&self.fault).is_some() || self.stopped.load(Ordering::SeqCst)
    }

    pub(super) fn completed(&self) -> u64 {
        lock(&self.completed).done
    }

    /// Blocks until `ticket` completed, the lane died, or `deadline` passed (`Err(())`).
    #[cfg(not(target_arch = "wasm32"))]
    fn block_until(
        &self,
        ticket: u64,
        deadline: Option<std::time::Instant>,
    ) -> std::result::Result<(), ()> {
        let mut progress = lock(&self.completed);
        while progress.done < ticket && !self.dead() {
            progress.wanted = progress.wanted.min(ticket);
            let Some(deadline) = deadline else {
                progress = self
                    .cv
                    .wait(progress)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(());
            }
            progress = self
                .cv
                .wait_timeout(progress, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Ok(())
    }
}

/// Marks the timeline stopped, and faulted if the thread is unwinding, when the worker exits by
/// any path, and wakes every waiter: a dead worker never leaves a wait blocked or a task pending.
#[cfg(not(target_arch = "wasm32"))]
struct WorkerExit(Arc<Timeline>);

#[cfg(not(target_arch = "wasm32"))]
impl Drop for WorkerExit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail("the worker thread panicked".into());
        }
        {
            let _completed = lock(&self.0.completed);
            self.0.stopped.store(true, Ordering::SeqCst);
            self.0.cv.notify_all();
        }
        self.0.wake(Ticket::DONE);
    }
}

/// One lane: its queue, its timeline and (natively) its worker thread.
pub(super) struct Lane {
    /// Last issued ticket and the sender to the worker; the mutex orders ticket issue with send.
    #[cfg(not(target_arch = "wasm32"))]
    queue: Mutex<(u64, mpsc::Sender<(u64, Command)>)>,
    /// Last issued ticket (commands run inline on `wasm32`).
    #[cfg(target_arch = "wasm32")]
    queue: Mutex<u64>,
    pub(super) timeline: Arc<Timeline>,
    submitted: AtomicU64,
    #[cfg(not(target_arch = "wasm32"))]
    worker: Mutex<Option<WorkerThread>>,
}

impl Lane {
    /// A lane whose worker (thread `name`) sleeps `delay` before every command; with
    /// `pool_threads` > 0 the worker is one thread of a rayon pool of that many, which the ops'
    /// parallel loops then run on ([`thread`]).
    ///
    /// # Errors
    /// [`Error::Backend`] if a thread cannot be spawned.
    pub(super) fn new(name: &str, delay: Duration, pool_threads: usize) -> Result<Self> {
        let timeline = Arc::new(Timeline::new());
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (tx, rx) = mpsc::channel::<(u64, Command)>();
            let tl = timeline.clone();
            let handle = WorkerThread::spawn(name, pool_threads, move |warmth| {
                worker(rx, tl, delay, &warmth);
            })?;
            Ok(Lane {
                queue: Mutex::new((0, tx)),
                timeline,
                submitted: AtomicU64::new(0),
                worker: Mutex::new(Some(handle)),
            })
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = (name, delay, pool_threads);
            Ok(Lane {
                queue: Mutex::new(0),
                timeline,
                submitted: AtomicU64::new(0),
            })
        }
    }

    /// Queues `cmd`; returns its ticket.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn enqueue(&self, cmd: Command) -> Result<u64> {
        let mut q = lock(&self.queue);
        let ticket = q.0 + 1;
        q.1.send((ticket, cmd)).map_err(|_| Error::DeviceLost {
            backend: NAME,
            detail: "the worker thread has stopped".into(),
        })?;
        q.0 = ticket;
        self.submitted.store(ticket, Ordering::SeqCst);
        Ok(ticket)
    }

    /// Runs the command inline (no threads on `wasm32`); its ticket is complete on return.
    #[cfg(target_arch = "wasm32")]
    pub(super) fn enqueue(&self, cmd: Command) -> Result<u64> {
        let mut q = lock(&self.queue);
        let ticket = *q + 1;
        *q = ticket;
        self.submitted.store(ticket, Ordering::SeqCst);
        self.timeline.finish(ticket, execute(cmd, &self.timeline));
        Ok(ticket)
    }

    /// The last ticket issued.
    pub(super) fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::SeqCst)
    }

    /// `Ok` when `ticket` was issued on this lane.
    ///
    /// # Errors
    /// [`Error::UnknownTicket`].
    pub(super) fn check_issued(&self, ticket: u64) -> Result<()> {
        let issued = self.submitted();
        if ticket > issued {
            return Err(Error::UnknownTicket { ticket, issued });
        }
        Ok(())
    }

    /// Time the worker spent waiting for the other lane.
    pub(super) fn waited(&self) -> Duration {
        Duration::from_nanos(self.timeline.waited_ns.load(Ordering::Relaxed))
    }

    /// Blocks until `ticket` completed or the lane died (the caller then reports the failure);
    /// `Err(Timeout)` once `timeout` ran out.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn wait(&self, ticket: u64, timeout: Option<Duration>, what: &str) -> Result<()> {
        // A limit too large to add to now is no limit.
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        self.timeline
            .block_until(ticket, deadline)
            .map_err(|()| Error::Timeout {
                backend: NAME,
                what: format!("{what} {ticket}"),
                timeout: timeout.unwrap_or_default(),
            })
    }

    /// Ready once `ticket` completed or the lane died (the caller then reports the failure);
    /// otherwise registers `cx`'s waker with the worker.
    pub(super) fn poll(&self, ticket: u64, cx: &mut Context<'_>) -> Poll<()> {
        // Register before the second look, so a completion in between still wakes this task.
        if self.timeline.completed() < ticket {
            lock(&self.timeline.wakers).register(Ticket(ticket), cx.waker());
        }
        if self.timeline.completed() >= ticket || self.timeline.dead() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Stops the worker after the work queued so far and joins it.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn shut_down(&self) {
        let _ = lock(&self.queue).1.send((0, Command::Shutdown));
        if let Some(handle) = lock(&self.worker).take() {
            handle.join();
        }
    }
}

fn execute(cmd: Command, timeline: &Timeline) -> std::result::Result<(), String> {
    match cmd {
        Command::Copy(src, dst) => {
            if Arc::ptr_eq(&src.mem, &dst.mem) {
                let mut m = lock(&src.mem);
                m.copy_within(src.offset..src.offset + src.size, dst.offset);
            } else {
                let (s, mut d) = lock_pair(&src.mem, &dst.mem);
                d[dst.offset..dst.offset + dst.size]
                    .copy_from_slice(&s[src.offset..src.offset + src.size]);
            }
            Ok(())
        }
        Command::Fill(r) => {
            lock(&r.mem)[r.offset..r.offset + r.size].fill(0);
            Ok(())
        }
        Command::Dispatch(op, args, n_inputs) => dispatch(&op, &args, n_inputs),
        Command::After(other, ticket) => {
            let start = crate::time::Instant::now();
            #[cfg(not(target_arch = "wasm32"))]
            let _ = other.block_until(ticket, None);
            let waited = start.elapsed().as_nanos();
            timeline
                .waited_ns
                .fetch_add(u64::try_from(waited).unwrap_or(u64::MAX), Ordering::Relaxed);
            match other.failure() {
                Some(f) if other.completed() < ticket => Err(format!("the other lane: {f}")),
                _ => Ok(()),
            }
        }
        Command::Panic => injected_panic(),
        #[cfg(not(target_arch = "wasm32"))]
        Command::Shutdown => Ok(()),
    }
}

/// Locks two distinct blocks in address order, so that two workers never wait on each other.
fn lock_pair<'a>(
    a: &'a BlockMem,
    b: &'a BlockMem,
) -> (MutexGuard<'a, HostMemory>, MutexGuard<'a, HostMemory>) {
    if Arc::as_ptr(a) < Arc::as_ptr(b) {
        let ga = lock(a);
        (ga, lock(b))
    } else {
        let gb = lock(b);
        (lock(a), gb)
    }
}

#[expect(clippy::panic, reason = "fault injection: the panic is the point")]
fn injected_panic() -> std::result::Result<(), String> {
    panic!("host worker: injected panic (HostBackend::simulate_worker_panic)")
}

#[cfg(not(target_arch = "wasm32"))]
fn worker(
    rx: mpsc::Receiver<(u64, Command)>,
    timeline: Arc<Timeline>,
    delay: Duration,
    warmth: &warm::Warmth,
) {
    let _exit = WorkerExit(timeline.clone());
    while let Ok((ticket, cmd)) = rx.recv() {
        if matches!(cmd, Command::Shutdown) {
            break;
        }
        warmth.touch();
        if !delay.is_zero() && !matches!(cmd, Command::After(..)) {
            std::thread::sleep(delay);
        }
        let result = match catch_unwind(AssertUnwindSafe(|| execute(cmd, &timeline))) {
            Ok(r) => r,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(format!("the worker panicked: {msg}"))
            }
        };
        timeline.finish(ticket, result);
    }
}
