//! The host (CPU) backend: the embedded default and the reference every other backend is compared
//! with.
//!
//! Blocks are heap allocations. Device work (copies, fills, ops) runs **asynchronously on a worker
//! thread**, in submission order, exactly like a GPU queue: each call returns a [`Ticket`] at once
//! and the ticket completes when the worker has finished it. That makes the pools' deferred-free
//! path real on a machine without a GPU: a free issued while the worker is busy must wait.
//!
//! Copies and fills on the **transfer lane** ([`TransferLanes`](tensormem_contract::TransferLanes), `lanes`) run on a second worker
//! thread with its own tickets, beside the compute worker, so copy/compute overlap is real here;
//! cross-lane waits are commands the workers execute (`queue`).
//!
//! On `wasm32` there are no threads: each command runs inline when it is enqueued and its ticket
//! is complete at once (the planner, the pools and the ops are the same code).
//!
//! Knobs in [`HostConfig`] let tests force the discrete-GPU path (no host-visible device memory),
//! slow the worker down, cap the "device" memory, and simulate a lost device or a worker that
//! dies.
//!
//! The backend assumes validated input (the `Validated` front of `tensormem` checks sizes,
//! alignment, host visibility and bindings; debug builds assert it). It keeps the block-table
//! lookups and range checks that stop a direct caller from indexing out of bounds, and the ticket
//! check that stops a wait from blocking forever.
//!
//! **A worker that dies is a lost device.** A panic while executing a command is caught, recorded
//! as the device's fault, and the worker carries on completing tickets, so every wait,
//! `synchronize` and drop returns and every later call reports [`Error::DeviceLost`]. Should the
//! thread exit anyway, a guard marks the timeline stopped and wakes every waiter.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::backend::{
    Backend, BlockDesc, BlockId, BlockRange, BlockTable, Capabilities, DeviceType, Extensions,
    Growable, Managed, ManagedMemory, MemoryKind, Ticket, TransferTicket,
};
use crate::numa::HostPlacement;
use crate::ops::Op;
use crate::{Error, Result};

mod growth;
mod holes;
mod lanes;
mod memory;
mod queue;

#[cfg(unix)]
use memory::map_alloc_err;
use memory::{HostMemory, heap_oom};
use queue::{Arg, BlockMem, Command, Lane};

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
    /// [`Error::OutOfMemory`], as a driver would; also the reported budget. With
    /// [`force_staging`](Self::force_staging) the `Upload` and `Readback` blocks are host memory,
    /// as on a discrete GPU, and do not count: a full device still stages transfers (and guard
    /// margin checks), as pinned host memory would on CUDA or Vulkan. Default `None`: no
    /// limit of its own, and the machine's physical memory (where the platform reports it) is the
    /// reported budget, so a runtime refuses a tensor larger than the machine as hopeless.
    pub device_memory: Option<u64>,
    /// Extra time the worker spends on every command, to widen the window in which work is in
    /// flight (tests of deferred frees). Default zero. No effect on `wasm32` (no worker).
    pub worker_delay: Duration,
    /// Extra time the transfer lane alone spends on every command, on top of `worker_delay`, so
    /// that copies land well after the kernels issued beside them (tests of the joins between the
    /// lanes). Default zero.
    pub transfer_delay: Duration,
    /// Offer blocks that grow in place ([`Extensions::growable`]) through reserve-and-commit
    /// of address space (Unix only). Default `true`; `false` makes the pools take the fallback
    /// path of adding blocks, as on a device without virtual memory management.
    pub in_place_growth: bool,
    /// Where every block's memory lives (all of the host backend's blocks are host memory).
    /// Default: unbound, pages placed by first touch. [`HostPlacement::Bound`] (made by
    /// [`NumaTopology::placement`](crate::numa::NumaTopology::placement)) maps each block with
    /// `mmap` and binds it to the node before its first touch (Linux); elsewhere the backend
    /// reports unbound. [`HostBackend::new`] refuses a node the kernel does not allow.
    pub host_placement: HostPlacement,
    /// Copies in both directions between host-visible and device memory
    /// ([`Capabilities::host_visible_copies`]). Default `true` (every block is host memory);
    /// `false` reports the staging directions only, as WebGPU does, so the front's narrower rule and the
    /// offload executor's swap-in through the host run on the host backend too.
    pub host_visible_copies: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            force_staging: false,
            max_block_size: physical_memory().map_or(1 << 40, |m| m.min(1 << 40)),
            device_memory: None,
            worker_delay: Duration::ZERO,
            transfer_delay: Duration::ZERO,
            in_place_growth: true,
            host_placement: HostPlacement::unbound(
                "host backend: pages placed by first touch (HostConfig::host_placement not set)",
            ),
            host_visible_copies: true,
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

/// The host backend. See the module doc.
pub struct HostBackend {
    caps: Capabilities,
    config: HostConfig,
    blocks: Mutex<BlockTable<BlockMem>>,
    /// Kernels, and the copies and fills of the original contract.
    compute: Lane,
    /// Copies and fills of the transfer lane, beside `compute` ([`queue`]).
    transfer: Lane,
    lost: AtomicBool,
    /// Bytes of reserved blocks given back in holes ([`holes`]): not counted as committed.
    decommitted: HoleBytes,
}

/// Bytes given back in holes, apart for device memory and staging memory
/// ([`HostBackend::on_device`]), so the device memory limit counts only the device's holes.
#[derive(Default)]
struct HoleBytes {
    device: AtomicU64,
    staging: AtomicU64,
}

impl HoleBytes {
    fn total(&self) -> u64 {
        self.device.load(Ordering::Relaxed) + self.staging.load(Ordering::Relaxed)
    }
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
            // Every block is host memory: a copy is a `memcpy` in any direction, unless the
            // configuration narrows it.
            host_visible_copies: config.host_visible_copies,
            // The placement in effect: the configured one, checked against the kernel (unbound
            // off Linux).
            host_placement: placement,
        };
        Ok(HostBackend {
            caps,
            config: config.clone(),
            blocks,
            compute: Lane::new(
                "tensormem-host-worker",
                config.worker_delay,
                rayon::current_num_threads(),
            )?,
            transfer: Lane::new(
                "tensormem-host-transfer",
                config.worker_delay + config.transfer_delay,
                0,
            )?,
            lost: AtomicBool::new(false),
            decommitted: HoleBytes::default(),
        })
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

    /// Total bytes committed in live blocks (holes given back in reserved blocks excluded).
    pub fn block_bytes(&self) -> u64 {
        lock(&self.blocks).bytes() - self.decommitted.total()
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
        for lane in [&self.compute, &self.transfer] {
            if let Some(detail) = lane.timeline.failure() {
                return Err(Error::DeviceLost {
                    backend: NAME,
                    detail,
                });
            }
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

    fn enqueue(&self, cmd: Command) -> Result<Ticket> {
        self.check_alive()?;
        self.compute.enqueue(cmd).map(Ticket)
    }

    fn enqueue_transfer(&self, cmd: Command) -> Result<TransferTicket> {
        self.check_alive()?;
        self.transfer.enqueue(cmd).map(TransferTicket)
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for HostBackend {
    /// The transfer lane first: compute work may wait for it, never the other way round once
    /// the caller stopped enqueueing.
    fn drop(&mut self) {
        self.transfer.shut_down();
        self.compute.shut_down();
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
        if self.on_device(desc.kind) {
            self.check_device_memory(self.device_bytes(&blocks), desc.size, desc.label)?;
        }
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
        let entry = lock(&self.blocks).remove(block)?;
        #[cfg(unix)]
        if let memory::HostMemory::Reserved(r) = &*lock(&entry.native) {
            self.decommitted_of(entry.kind)
                .fetch_sub(r.holes.bytes(), Ordering::Relaxed);
        }
        drop(entry);
        Ok(())
    }

    fn extensions(&self) -> Extensions<'_> {
        Extensions {
            growable: growth::offered(&self.config).map(|_| self as &dyn Growable),
            transfer_lanes: Some(self),
            managed: Some(self),
            ..Extensions::default()
        }
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
        let command = self.copy_command(src, dst)?;
        debug_assert_eq!(
            src.size, dst.size,
            "host: copy sizes (the front refuses a mismatch)"
        );
        self.enqueue(command)
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.enqueue(self.fill_command(range)?)
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
        Ok(Ticket(self.compute.submitted()))
    }

    fn completed(&self) -> Result<Ticket> {
        self.check_alive()?;
        Ok(Ticket(self.compute.timeline.completed()))
    }

    /// The host backend has no default limit (`None` waits forever): its worker cannot hang
    /// the way a GPU can, and a dead worker wakes every waiter.
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        self.check_alive()?;
        self.compute.check_issued(ticket.0)?;
        self.compute.wait(ticket.0, timeout, "ticket")?;
        self.check_alive()
    }

    /// Registers the waker with the worker, which wakes it when the ticket completes.
    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check_alive().and(self.compute.check_issued(ticket.0)) {
            return Poll::Ready(Err(e));
        }
        self.compute.poll(ticket.0, cx).map(|()| self.check_alive())
    }
}

/// Nothing ever moves (also under `force_staging`, which only hides device-local blocks from the
/// host): a prefetch is the default no-op.
impl Managed for HostBackend {
    fn managed_memory(&self) -> ManagedMemory {
        ManagedMemory::SameMemory
    }
}

impl HostBackend {
    /// The NUMA node blocks are bound to, if any.
    fn bound_node(&self) -> Option<u32> {
        self.caps.host_placement.bound_node()
    }

    /// Whether blocks of `kind` are device memory, which [`HostConfig::device_memory`] caps: all
    /// of them on a device whose memory is the host's, all but the staging kinds under
    /// [`HostConfig::force_staging`] (a discrete GPU stages through host memory).
    fn on_device(&self, kind: MemoryKind) -> bool {
        !self.config.force_staging || !matches!(kind, MemoryKind::Upload | MemoryKind::Readback)
    }

    /// The hole counter of blocks of `kind` (holes exist only where blocks grow in place: unix).
    #[cfg(unix)]
    fn decommitted_of(&self, kind: MemoryKind) -> &AtomicU64 {
        if self.on_device(kind) {
            &self.decommitted.device
        } else {
            &self.decommitted.staging
        }
    }

    /// Bytes of `blocks` on the device ([`Self::on_device`]), holes included (see
    /// [`Self::check_device_memory`]).
    fn device_bytes(&self, blocks: &BlockTable<BlockMem>) -> u64 {
        let staged: u64 = [MemoryKind::Upload, MemoryKind::Readback]
            .into_iter()
            .filter(|&kind| !self.on_device(kind))
            .map(|kind| blocks.bytes_of(kind))
            .sum();
        blocks.bytes() - staged
    }

    /// Refuses `more` bytes when the committed bytes (`held`, the device's bytes in the block
    /// table, less the holes) would pass [`HostConfig::device_memory`].
    fn check_device_memory(&self, held: u64, more: u64, label: &str) -> Result<()> {
        let held = held.saturating_sub(self.decommitted.device.load(Ordering::Relaxed));
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
