//! Failure injection: a [`Backend`] wrapper that makes a chosen call fail, so the suite can prove
//! that every error path of the pools is transactional (issue 12, item 6) on every target.
//!
//! Calls are counted from the moment a failure is armed ([`Faulty::fail_call`]); the armed call
//! fails once with an error of the kind a driver would give for it (out of memory for a block
//! allocation, a native API failure for everything else) and never reaches the real backend.
//! Nothing is armed by default: the wrapper then forwards every call unchanged.
//!
//! Two more faults a device has: a memory cap ([`Faulty::set_cap`]: block allocations beyond it
//! fail with out of memory, as a full device does) and loss ([`Faulty::lose`]: every later call
//! fails with [`Error::DeviceLost`]). And one limit: a smaller largest binding
//! ([`Faulty::with_binding_limit`], as a browser's 128 MiB WebGPU binding, scaled down).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tensormem::backend::lanes;
use tensormem::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, Error, MappedAccess, OomReport, Op,
    Result, Ticket, TransferLane, TransferLanes, TransferTicket,
};

/// Sentinel for "nothing armed".
const UNARMED: u64 = u64::MAX;

/// A backend whose `n`-th call from now fails once. See the module doc.
pub struct Faulty {
    inner: Arc<dyn Backend>,
    /// The inner backend's capabilities, with the binding limit this wrapper reports.
    caps: Capabilities,
    /// Calls left before the armed one (`UNARMED`: none armed).
    countdown: AtomicU64,
    /// Failures injected so far.
    injected: AtomicU64,
    lost: AtomicBool,
    /// Bytes of blocks the device may hold (`u64::MAX`: no cap).
    cap: AtomicU64,
    /// Live blocks and their sizes, for the cap.
    blocks: Mutex<HashMap<BlockId, u64>>,
    /// Offer the inner backend's transfer lane (its calls counted and failed like the rest);
    /// else the lane collapses onto the compute queue.
    lanes: bool,
}

impl Faulty {
    /// Wraps `inner` with nothing armed.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        let caps = Capabilities {
            // The wrapper promises the staging copy directions only, whatever the backend
            // behind it copies.
            host_visible_copies: false,
            ..inner.capabilities().clone()
        };
        Faulty {
            caps,
            inner,
            countdown: AtomicU64::new(UNARMED),
            injected: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            cap: AtomicU64::new(u64::MAX),
            blocks: Mutex::new(HashMap::new()),
            lanes: false,
        }
    }

    /// Wraps `inner` offering its transfer lane, where it has one: the lane's calls count and
    /// fail like the others.
    pub fn with_lanes(inner: Arc<dyn Backend>) -> Self {
        let mut faulty = Faulty::new(inner);
        faulty.lanes = faulty.inner.transfer_lanes().is_some();
        faulty
    }

    /// Wraps `inner` reporting a largest binding of at most `limit` bytes: dispatches over larger
    /// bindings reach the backend only as the validating front's parts.
    pub fn with_binding_limit(inner: Arc<dyn Backend>, limit: u64) -> Self {
        let mut faulty = Faulty::new(inner);
        faulty.caps.max_binding_size = faulty.caps.max_binding_size.min(limit);
        faulty
    }

    /// Wraps `inner` reporting a largest block and binding of at most `limit` bytes, as a
    /// smaller device would (WebGPU's `maxBufferSize` and `maxStorageBufferBindingSize`):
    /// larger tensors are segmented, larger dispatches split or refused.
    pub fn with_block_limit(inner: Arc<dyn Backend>, limit: u64) -> Self {
        let mut faulty = Faulty::with_binding_limit(inner, limit);
        faulty.caps.max_block_size = faulty.caps.max_block_size.min(limit);
        faulty
    }

    /// Caps the bytes of blocks the device holds: beyond it, `alloc_block` is out of memory.
    pub fn set_cap(&self, bytes: u64) {
        self.cap.store(bytes, Ordering::SeqCst);
    }

    /// Bytes of blocks allocated through the wrapper and not yet freed.
    pub fn block_bytes(&self) -> u64 {
        self.blocks().values().sum()
    }

    /// From now on every call fails with [`Error::DeviceLost`], as after a driver reset.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    fn blocks(&self) -> std::sync::MutexGuard<'_, HashMap<BlockId, u64>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the `n`-th fallible call from now (0: the next one) fail once.
    pub fn fail_call(&self, n: u64) {
        self.countdown.store(n, Ordering::SeqCst);
    }

    /// Disarms a failure that has not fired yet.
    pub fn disarm(&self) {
        self.countdown.store(UNARMED, Ordering::SeqCst);
    }

    /// Failures injected since creation.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Whether this call is the armed one (and counts it).
    fn fires(&self) -> bool {
        let prev = self
            .countdown
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| match c {
                UNARMED => None,
                0 => Some(UNARMED),
                c => Some(c - 1),
            });
        if prev == Ok(0) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            false
        }
    }

    fn check(&self, api: &'static str) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::DeviceLost {
                backend: "faulty",
                detail: format!("{api} after the device was lost"),
            });
        }
        if self.fires() {
            return Err(Error::Backend {
                backend: "faulty",
                api,
                code: -1,
                message: "injected failure".into(),
            });
        }
        Ok(())
    }
}

impl Backend for Faulty {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn extensions(&self) -> tensormem::Extensions<'_> {
        tensormem::Extensions {
            transfer_lanes: self.lanes.then_some(self as &dyn TransferLanes),
            ..tensormem::Extensions::default()
        }
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::DeviceLost {
                backend: "faulty",
                detail: "alloc_block after the device was lost".into(),
            });
        }
        let held = self.block_bytes();
        let over_cap = held.saturating_add(desc.size) > self.cap.load(Ordering::SeqCst);
        if over_cap || self.fires() {
            return Err(Error::OutOfMemory(Box::new(OomReport {
                pool: "faulty driver".into(),
                label: Some(desc.label.to_string()),
                requested: desc.size,
                reserved: held,
                in_use: 0,
                largest_free: 0,
                fragmentation: 0.0,
                budget: None,
                pending_free: 0,
                largest_live: Vec::new(),
                trim_would_help: false,
                static_plan_would_fit: None,
            })));
        }
        let id = self.inner.alloc_block(desc)?;
        self.blocks().insert(id, desc.size);
        Ok(id)
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        self.check("free_block")?;
        self.inner.free_block(block)?;
        self.blocks().remove(&block);
        Ok(())
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        self.check("write_mapped")?;
        self.inner.write_mapped(block, offset, data)
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check("read_mapped")?;
        self.inner.read_mapped(block, offset, out)
    }

    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        self.check("write_queued")?;
        self.inner.write_queued(dst, data)
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.check("copy")?;
        self.inner.copy(src, dst)
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.check("fill_zero")?;
        self.inner.fill_zero(range)
    }

    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        self.check("dispatch")?;
        // The limit this wrapper reports is enforced as a device would.
        if let Some(b) = bindings
            .iter()
            .find(|b| b.size > self.caps.max_binding_size)
        {
            return Err(Error::TooLarge {
                what: "binding",
                requested: b.size,
                limit: self.caps.max_binding_size,
                limit_name: "max_binding_size",
            });
        }
        self.inner.dispatch(op, bindings)
    }

    fn flush(&self) -> Result<Ticket> {
        self.check("flush")?;
        self.inner.flush()
    }

    fn completed(&self) -> Result<Ticket> {
        self.check("completed")?;
        self.inner.completed()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<std::time::Duration>) -> Result<()> {
        self.check("wait")?;
        self.inner.wait_timeout(ticket, timeout)
    }

    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check("poll_ticket") {
            return Poll::Ready(Err(e));
        }
        self.inner.poll_ticket(ticket, cx)
    }

    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check("poll_host_access") {
            return Poll::Ready(Err(e));
        }
        self.inner.poll_host_access(request, cx)
    }
}

/// The inner backend's lane, each call counted and failed like the compute calls.
impl TransferLanes for Faulty {
    fn transfer_lane(&self) -> TransferLane {
        lanes::of(self.inner.as_ref()).transfer_lane()
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.check("transfer_copy")?;
        lanes::of(self.inner.as_ref()).transfer_copy(src, dst)
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        self.check("transfer_fill_zero")?;
        lanes::of(self.inner.as_ref()).transfer_fill_zero(range)
    }

    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        self.check("transfer_after")?;
        lanes::of(self.inner.as_ref()).transfer_after(ticket)
    }

    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.check("compute_after")?;
        lanes::of(self.inner.as_ref()).compute_after(ticket)
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        self.check("transfer_completed")?;
        lanes::of(self.inner.as_ref()).transfer_completed()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        self.check("wait_transfer")?;
        lanes::of(self.inner.as_ref()).wait_transfer_timeout(ticket, timeout)
    }

    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check("poll_transfer") {
            return Poll::Ready(Err(e));
        }
        lanes::of(self.inner.as_ref()).poll_transfer(ticket, cx)
    }

    fn transfer_stall(&self) -> Option<std::time::Duration> {
        lanes::of(self.inner.as_ref()).transfer_stall()
    }
}
