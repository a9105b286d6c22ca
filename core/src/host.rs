//! The host (CPU) backend: the embedded default and the reference every other backend is compared
//! with.
//!
//! Blocks are heap allocations. Device work (copies, fills, ops) runs **asynchronously on a worker
//! thread**, in submission order, exactly like a GPU queue: each call returns a [`Ticket`] at once
//! and the ticket completes when the worker has finished it. That makes the pools' deferred-free
//! path real on a machine without a GPU: a free issued while the worker is busy must wait.
//!
//! On `wasm32` there are no threads: each command runs inline when it is enqueued and its ticket
//! is complete at once (the planner, the pools and the ops are the same code).
//!
//! Knobs in [`HostConfig`] let tests force the discrete-GPU path (no host-visible device memory),
//! slow the worker down, cap the "device" memory, and simulate a lost device or a worker that
//! dies.
//!
//! The backend assumes validated input (the [`Validated`](crate::Validated) front checks sizes,
//! alignment, host visibility and bindings; debug builds assert it). It keeps the block-table
//! lookups and range checks that stop a direct caller from indexing out of bounds, and the ticket
//! check that stops a wait from blocking forever.
//!
//! **A worker that dies is a lost device.** A panic while executing a command is caught, recorded
//! as the device's fault, and the worker carries on completing tickets, so every wait,
//! `synchronize` and drop returns and every later call reports [`Error::DeviceLost`]. Should the
//! thread exit anyway, a guard marks the timeline stopped and wakes every waiter.

#[cfg(not(target_arch = "wasm32"))]
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(target_arch = "wasm32"))]
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
#[cfg(not(target_arch = "wasm32"))]
use std::thread::JoinHandle;
use std::time::Duration;

use crate::backend::{
    Backend, BlockDesc, BlockId, BlockRange, BlockTable, Capabilities, DeviceType, InPlaceGrowth,
    ManagedMemory, MemoryKind, Ticket, TicketWakers,
};
use crate::numa::HostPlacement;
use crate::ops::{self, Op};
use crate::{Error, Result};

mod growth;
mod memory;

use memory::HostMemory;

const NAME: &str = "host";

/// Configuration of the [`HostBackend`].
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Report device memory as not host-visible, so the pools stage every transfer through
    /// `Upload`/`Readback` blocks as on a discrete GPU. Default `false`.
    pub force_staging: bool,
    /// Largest block in bytes. Default: the machine's physical memory where the platform reports
    /// it (Linux `/proc/meminfo`), at most 1 TiB; 1 TiB elsewhere. A request above it is
    /// [`Error::TooLarge`] (hopeless), not a retryable [`Error::OutOfMemory`].
    pub max_block_size: u64,
    /// Total bytes of blocks the "device" holds before `alloc_block` fails with
    /// [`Error::OutOfMemory`], as a driver would; also the reported budget. Default `None`: no
    /// limit of its own, and the machine's physical memory (where the platform reports it) is the
    /// reported budget, so a runtime refuses a tensor larger than the machine as hopeless.
    pub device_memory: Option<u64>,
    /// Extra time the worker spends on every command, to widen the window in which work is in
    /// flight (tests of deferred frees). Default zero. No effect on `wasm32` (no worker).
    pub worker_delay: Duration,
    /// Offer blocks that grow in place ([`Backend::in_place_growth`]) through reserve-and-commit
    /// of address space (Unix only). Default `true`; `false` makes the pools take the fallback
    /// path of adding blocks, as on a device without virtual memory management.
    pub in_place_growth: bool,
    /// Where every block's memory lives (all of the host backend's blocks are host memory).
    /// Default: unbound, pages placed by first touch. [`HostPlacement::Bound`] (made by
    /// [`NumaTopology::placement`](crate::numa::NumaTopology::placement)) maps each block with
    /// `mmap` and binds it to the node before its first touch (Linux); elsewhere the backend
    /// reports unbound. [`HostBackend::new`] refuses a node the kernel does not allow.
    pub host_placement: HostPlacement,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            force_staging: false,
            max_block_size: physical_memory().map_or(1 << 40, |m| m.min(1 << 40)),
            device_memory: None,
            worker_delay: Duration::ZERO,
            in_place_growth: true,
            host_placement: HostPlacement::unbound(
                "host backend: pages placed by first touch (HostConfig::host_placement not set)",
            ),
        }
    }
}

/// Total physical memory in bytes, where the platform reports it.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

type BlockMem = Arc<Mutex<HostMemory>>;

enum Command {
    Copy(Arg, Arg),
    Fill(Arg),
    /// The op, its operands (inputs then outputs), and the number of inputs.
    Dispatch(Op, Vec<Arg>, usize),
    /// Fault injection: the worker panics ([`HostBackend::simulate_worker_panic`]).
    Panic,
    #[cfg(not(target_arch = "wasm32"))]
    Shutdown,
}

/// Progress of the worker: the last ticket finished, plus a condvar to wait on it.
struct Timeline {
    completed: Mutex<u64>,
    cv: Condvar,
    /// First error the worker hit; reported by every later call (a "lost device").
    fault: Mutex<Option<String>>,
    /// Tasks awaiting a ticket; woken as their tickets complete, all at once on a fault.
    wakers: Mutex<TicketWakers>,
    /// The worker thread has exited: nothing will complete any more.
    stopped: AtomicBool,
}

impl Timeline {
    fn fail(&self, fault: String) {
        lock(&self.fault).get_or_insert(fault);
        self.cv.notify_all();
    }

    /// Records that `ticket` finished (with the command's failure, if any) and wakes its waiters:
    /// blocked ones through the condvar, awaiting tasks through their wakers (every task on a
    /// fault, so each sees the error).
    fn finish(&self, ticket: u64, result: std::result::Result<(), String>) {
        if let Err(e) = result {
            self.fail(e);
        }
        *lock(&self.completed) = ticket;
        self.cv.notify_all();
        self.wake(Ticket(ticket));
    }

    /// Wakes the tasks awaiting tickets up to `done`, or every task once faulted or stopped.
    fn wake(&self, done: Ticket) {
        let woken = if lock(&self.fault).is_some() || self.stopped.load(Ordering::SeqCst) {
            lock(&self.wakers).take_all()
        } else {
            lock(&self.wakers).take_completed(done)
        };
        woken.into_iter().for_each(std::task::Waker::wake);
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

/// The host backend. See the module doc.
pub struct HostBackend {
    caps: Capabilities,
    config: HostConfig,
    /// The placement in effect: the configured one, checked against the kernel (unbound off
    /// Linux).
    placement: HostPlacement,
    blocks: Mutex<BlockTable<BlockMem>>,
    /// Last issued ticket and the sender to the worker; the mutex makes `HostBackend` `Sync` and
    /// orders ticket issue with send.
    #[cfg(not(target_arch = "wasm32"))]
    queue: Mutex<(u64, mpsc::Sender<(u64, Command)>)>,
    /// Last issued ticket (commands run inline on `wasm32`).
    #[cfg(target_arch = "wasm32")]
    queue: Mutex<u64>,
    timeline: Arc<Timeline>,
    lost: AtomicBool,
    #[cfg(not(target_arch = "wasm32"))]
    worker: Mutex<Option<JoinHandle<()>>>,
    submitted: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere already failed the test or program; the data (bytes,
    // counters) is still consistent enough to report from.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HostBackend {
    /// Creates a host backend with its worker thread.
    ///
    /// # Errors
    /// [`Error::Backend`] if the worker thread cannot be spawned, [`Error::NumaNode`] if
    /// [`HostConfig::host_placement`] binds to a node the kernel does not let this process use.
    pub fn new(config: HostConfig) -> Result<Self> {
        let placement = memory::effective_placement(&config.host_placement)?;
        #[cfg(not(target_arch = "wasm32"))]
        let (tx, rx) = mpsc::channel::<(u64, Command)>();
        let timeline = Arc::new(Timeline {
            completed: Mutex::new(0),
            cv: Condvar::new(),
            fault: Mutex::new(None),
            wakers: Mutex::new(TicketWakers::default()),
            stopped: AtomicBool::new(false),
        });
        let blocks = Mutex::new(BlockTable::new(NAME));
        let caps = Capabilities {
            backend: NAME,
            device_name: format!("host CPU, {} threads", rayon::current_num_threads()),
            device_type: DeviceType::HostCpu,
            binding_align: 16,
            copy_align: 4,
            max_block_size: config.max_block_size,
            max_binding_size: config.max_block_size,
            device_host_visible: !config.force_staging,
            queued_write_max: 0,
            // The host device's memory is the machine's: a runtime never plans beyond it.
            budget: config.device_memory.or_else(physical_memory),
        };
        let backend = HostBackend {
            caps,
            config: config.clone(),
            placement,
            blocks,
            #[cfg(not(target_arch = "wasm32"))]
            queue: Mutex::new((0, tx)),
            #[cfg(target_arch = "wasm32")]
            queue: Mutex::new(0),
            timeline: timeline.clone(),
            lost: AtomicBool::new(false),
            #[cfg(not(target_arch = "wasm32"))]
            worker: Mutex::new(None),
            submitted: AtomicU64::new(0),
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let delay = config.worker_delay;
            let handle = std::thread::Builder::new()
                .name("tensormem-host-worker".into())
                .spawn(move || worker(rx, timeline, delay))
                .map_err(|e| Error::Backend {
                    backend: NAME,
                    api: "std::thread::spawn",
                    code: e.raw_os_error().map_or(0, i64::from),
                    message: e.to_string(),
                })?;
            *lock(&backend.worker) = Some(handle);
        }
        Ok(backend)
    }

    /// Makes every later call fail with [`Error::DeviceLost`], as a driver reset would.
    pub fn simulate_device_loss(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Makes the worker thread panic on its next command, as a bug in a kernel would. The
    /// device is then lost: every wait returns and every later call reports
    /// [`Error::DeviceLost`]. Returns the ticket of the poisoned command.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device is already lost.
    pub fn simulate_worker_panic(&self) -> Result<Ticket> {
        self.enqueue(Command::Panic)
    }

    /// Total bytes in live blocks.
    pub fn block_bytes(&self) -> u64 {
        lock(&self.blocks).bytes()
    }

    /// Number of live blocks.
    pub fn block_count(&self) -> usize {
        lock(&self.blocks).len()
    }

    fn check_alive(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::DeviceLost {
                backend: NAME,
                detail: "device loss was simulated".into(),
            });
        }
        if let Some(fault) = lock(&self.timeline.fault).clone() {
            return Err(Error::DeviceLost {
                backend: NAME,
                detail: format!("the worker failed: {fault}"),
            });
        }
        if self.timeline.stopped.load(Ordering::SeqCst) {
            return Err(Error::DeviceLost {
                backend: NAME,
                detail: "the worker thread has stopped".into(),
            });
        }
        Ok(())
    }

    /// The memory behind a range, after the table's lookup and bounds check (which keep a direct
    /// caller from indexing out of bounds).
    fn check_range(&self, r: BlockRange, what: &'static str) -> Result<BlockMem> {
        Ok(lock(&self.blocks).range(r, what)?.native.clone())
    }

    fn mapped(&self, block: BlockId, offset: u64, len: usize) -> Result<BlockMem> {
        self.check_alive()?;
        let r = BlockRange {
            block,
            offset,
            size: len as u64,
        };
        let blocks = lock(&self.blocks);
        let entry = blocks.range(r, "block")?;
        debug_assert!(
            entry.kind != MemoryKind::DeviceLocal || !self.config.force_staging,
            "host: mapped access to device-local block {} under force_staging (the front refuses it)",
            block.0
        );
        Ok(entry.native.clone())
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn enqueue(&self, cmd: Command) -> Result<Ticket> {
        self.check_alive()?;
        let mut q = lock(&self.queue);
        let ticket = q.0 + 1;
        q.1.send((ticket, cmd)).map_err(|_| Error::DeviceLost {
            backend: NAME,
            detail: "the worker thread has stopped".into(),
        })?;
        q.0 = ticket;
        self.submitted.store(ticket, Ordering::SeqCst);
        Ok(Ticket(ticket))
    }

    /// Runs the command inline (no threads on `wasm32`); its ticket is complete on return.
    #[cfg(target_arch = "wasm32")]
    fn enqueue(&self, cmd: Command) -> Result<Ticket> {
        self.check_alive()?;
        let mut q = lock(&self.queue);
        let ticket = *q + 1;
        *q = ticket;
        self.submitted.store(ticket, Ordering::SeqCst);
        self.timeline.finish(ticket, execute(cmd));
        Ok(Ticket(ticket))
    }
}

/// One argument of a command: the block's memory (kept alive by the command even if the block is
/// freed meanwhile) and the range in it.
#[derive(Clone)]
struct Arg {
    mem: BlockMem,
    offset: usize,
    size: usize,
}

fn execute(cmd: Command) -> std::result::Result<(), String> {
    match cmd {
        Command::Copy(src, dst) => {
            if Arc::ptr_eq(&src.mem, &dst.mem) {
                let mut m = lock(&src.mem);
                m.copy_within(src.offset..src.offset + src.size, dst.offset);
            } else {
                let s = lock(&src.mem);
                let mut d = lock(&dst.mem);
                d[dst.offset..dst.offset + dst.size]
                    .copy_from_slice(&s[src.offset..src.offset + src.size]);
            }
            Ok(())
        }
        Command::Fill(r) => {
            lock(&r.mem)[r.offset..r.offset + r.size].fill(0);
            Ok(())
        }
        Command::Dispatch(op, args, n_inputs) => {
            // Lock each distinct block once (only this thread ever holds two block locks, so the
            // order cannot deadlock), compute from borrowed inputs into fresh outputs, then copy
            // the outputs back: operands may alias one block (an arena) and outputs may overlap
            // inputs of later ops, never of this one.
            let mut blocks: Vec<&BlockMem> = Vec::new();
            let slot: Vec<usize> = args
                .iter()
                .map(
                    |a| match blocks.iter().position(|m| Arc::ptr_eq(m, &a.mem)) {
                        Some(i) => i,
                        None => {
                            blocks.push(&a.mem);
                            blocks.len() - 1
                        }
                    },
                )
                .collect();
            let mut guards: Vec<MutexGuard<'_, HostMemory>> =
                blocks.iter().map(|m| lock(m)).collect();
            let mut outputs: Vec<Vec<u8>> =
                args[n_inputs..].iter().map(|a| vec![0u8; a.size]).collect();
            {
                let inputs: Vec<&[u8]> = args[..n_inputs]
                    .iter()
                    .zip(&slot)
                    .map(|(a, &i)| &guards[i][a.offset..a.offset + a.size])
                    .collect();
                let mut out_refs: Vec<&mut [u8]> =
                    outputs.iter_mut().map(Vec::as_mut_slice).collect();
                ops::host::run(&op, &inputs, &mut out_refs).map_err(|e| e.to_string())?;
            }
            for ((a, &i), out) in args[n_inputs..].iter().zip(&slot[n_inputs..]).zip(&outputs) {
                guards[i][a.offset..a.offset + a.size].copy_from_slice(out);
            }
            Ok(())
        }
        Command::Panic => injected_panic(),
        #[cfg(not(target_arch = "wasm32"))]
        Command::Shutdown => Ok(()),
    }
}

#[expect(clippy::panic, reason = "fault injection: the panic is the point")]
fn injected_panic() -> std::result::Result<(), String> {
    panic!("host worker: injected panic (HostBackend::simulate_worker_panic)")
}

#[cfg(not(target_arch = "wasm32"))]
fn worker(rx: mpsc::Receiver<(u64, Command)>, timeline: Arc<Timeline>, delay: Duration) {
    let _exit = WorkerExit(timeline.clone());
    while let Ok((ticket, cmd)) = rx.recv() {
        if matches!(cmd, Command::Shutdown) {
            break;
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let result = match catch_unwind(AssertUnwindSafe(|| execute(cmd))) {
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

#[cfg(not(target_arch = "wasm32"))]
impl Drop for HostBackend {
    fn drop(&mut self) {
        let _ = lock(&self.queue).1.send((0, Command::Shutdown));
        if let Some(handle) = lock(&self.worker).take() {
            let _ = handle.join();
        }
    }
}

impl Backend for HostBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        self.check_alive()?;
        debug_assert!(
            desc.size > 0 && desc.size <= self.caps.max_block_size,
            "host: block of {} bytes (the front refuses zero and > max_block_size)",
            desc.size
        );
        let mut blocks = lock(&self.blocks);
        self.check_device_memory(blocks.bytes(), desc.size, desc.label)?;
        let size = usize::try_from(desc.size).map_err(|_| Error::TooLarge {
            what: "block",
            requested: desc.size,
            limit: usize::MAX as u64,
            limit_name: "address space",
        })?;
        let mem = match self.bound_node() {
            #[cfg(target_os = "linux")]
            Some(node) => HostMemory::bound(size, node)
                .map_err(|e| map_alloc_err(e, desc.label, desc.size, blocks.bytes()))?,
            _ => HostMemory::zeroed(size)
                .ok_or_else(|| heap_oom(desc.label, desc.size, blocks.bytes()))?,
        };
        Ok(blocks.insert(desc.kind, desc.size, Arc::new(Mutex::new(mem))))
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        lock(&self.blocks).remove(block)?;
        Ok(())
    }

    fn in_place_growth(&self) -> Option<InPlaceGrowth> {
        growth::offered(&self.config)
    }

    fn host_placement(&self) -> HostPlacement {
        self.placement.clone()
    }

    /// Every block is host memory, so managed blocks are too, and nothing ever moves (also under
    /// `force_staging`, which only hides device-local blocks from the host).
    fn managed_memory(&self) -> ManagedMemory {
        ManagedMemory::SameMemory
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.check_alive()?;
        growth::reserve(self, desc, reserve)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.check_alive()?;
        growth::resize(self, block, size)
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        let mem = self.mapped(block, offset, data.len())?;
        let o = offset as usize;
        lock(&mem)[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        let mem = self.mapped(block, offset, out.len())?;
        let o = offset as usize;
        out.copy_from_slice(&lock(&mem)[o..o + out.len()]);
        Ok(())
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.check_alive()?;
        debug_assert_eq!(
            src.size, dst.size,
            "host: copy sizes (the front refuses a mismatch)"
        );
        let (s, d) = (
            self.arg(src, "copy source")?,
            self.arg(dst, "copy destination")?,
        );
        self.enqueue(Command::Copy(s, d))
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        let r = self.arg(range, "fill range")?;
        self.enqueue(Command::Fill(r))
    }

    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        self.check_alive()?;
        // Parameters are checked even so: the worker must learn the input count from them, and
        // parameters whose size arithmetic overflows must never reach it.
        let inputs = op.signature()?.inputs.len();
        let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
        debug_assert!(
            op.check_binding_sizes(&sizes).is_ok(),
            "host: {} bindings {sizes:?} (the front refuses them)",
            op.name()
        );
        let args = bindings
            .iter()
            .map(|b| self.arg(*b, "binding"))
            .collect::<Result<Vec<_>>>()?;
        self.enqueue(Command::Dispatch(op.clone(), args, inputs))
    }

    fn flush(&self) -> Result<Ticket> {
        self.check_alive()?;
        Ok(Ticket(self.submitted.load(Ordering::SeqCst)))
    }

    fn completed(&self) -> Result<Ticket> {
        self.check_alive()?;
        Ok(Ticket(*lock(&self.timeline.completed)))
    }

    /// The host backend has no default limit (`None` waits forever): its worker cannot hang
    /// the way a GPU can, and a dead worker wakes every waiter.
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<std::time::Duration>) -> Result<()> {
        self.check_issued(ticket)?;
        // A limit too large to add to now is no limit.
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut done = lock(&self.timeline.completed);
        while *done < ticket.0
            && !self.timeline.stopped.load(Ordering::SeqCst)
            && lock(&self.timeline.fault).is_none()
        {
            let Some(deadline) = deadline else {
                done = self
                    .timeline
                    .cv
                    .wait(done)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    backend: NAME,
                    what: format!("ticket {}", ticket.0),
                    timeout: timeout.unwrap_or_default(),
                });
            }
            done = self
                .timeline
                .cv
                .wait_timeout(done, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(done);
        self.check_alive()
    }

    /// Registers the waker with the worker, which wakes it when the ticket completes.
    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check_issued(ticket) {
            return Poll::Ready(Err(e));
        }
        // Register before the second look, so a completion in between still wakes this task.
        let done = *lock(&self.timeline.completed);
        if done < ticket.0 {
            lock(&self.timeline.wakers).register(ticket, cx.waker());
        }
        let done = *lock(&self.timeline.completed);
        if let Err(e) = self.check_alive() {
            return Poll::Ready(Err(e));
        }
        if done >= ticket.0 {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// The driver-style out-of-memory error of a failed host allocation.
fn heap_oom(label: &str, requested: u64, reserved: u64) -> Error {
    Error::OutOfMemory(Box::new(crate::OomReport {
        pool: "host heap".into(),
        label: Some(label.to_string()),
        requested,
        reserved,
        ..Default::default()
    }))
}

/// The error of a failed `mmap` or `mbind`: out of memory for `ENOMEM` (retryable, as a
/// driver's), otherwise the OS error.
#[cfg(unix)]
fn map_alloc_err(e: std::io::Error, label: &str, requested: u64, reserved: u64) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOMEM) | None => heap_oom(label, requested, reserved),
        Some(code) => Error::Backend {
            backend: NAME,
            api: "mmap/mbind",
            code: code.into(),
            message: e.to_string(),
        },
    }
}

impl HostBackend {
    /// The NUMA node blocks are bound to, if any.
    fn bound_node(&self) -> Option<u32> {
        self.placement.bound_node()
    }

    /// Checks that the device is alive and `ticket` was issued.
    fn check_issued(&self, ticket: Ticket) -> Result<()> {
        self.check_alive()?;
        let submitted = self.submitted.load(Ordering::SeqCst);
        if ticket.0 > submitted {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: submitted,
            });
        }
        Ok(())
    }

    /// Refuses `more` bytes beyond `held` when [`HostConfig::device_memory`] caps the device.
    fn check_device_memory(&self, held: u64, more: u64, label: &str) -> Result<()> {
        match self.config.device_memory {
            Some(limit) if held.saturating_add(more) > limit => {
                Err(Error::OutOfMemory(Box::new(crate::OomReport {
                    pool: "host device memory".into(),
                    label: Some(label.to_string()),
                    requested: more,
                    reserved: held,
                    budget: Some(limit),
                    ..Default::default()
                })))
            }
            _ => Ok(()),
        }
    }

    fn arg(&self, r: BlockRange, what: &'static str) -> Result<Arg> {
        let mem = self.check_range(r, what)?;
        Ok(Arg {
            mem,
            offset: r.offset as usize,
            size: r.size as usize,
        })
    }
}

#[cfg(test)]
mod tests;
