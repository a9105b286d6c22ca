//! The validating front: one [`Backend`] in front of every backend that checks every call before
//! the device sees it (wgpu-core in front of wgpu-hal is the model).
//!
//! ```text
//! Runtime, pools ──> Validated ──> dyn Backend (host, vulkan, wgpu, cuda)
//!                    │  ranges, alignment, binding sizes, overlap of outputs, checked shape
//!                    │  arithmetic, host visibility, tickets, device state
//!                    └─ a shadow BlockTable<()> of every live block, and the in-flight uses
//! ```
//!
//! Each check is one rule in `rules` with one typed error, so the same misuse gets the same
//! error on every backend; backends assume validated input (they keep only the lookups they need
//! to reach native objects, which also keeps a direct caller memory-safe). The front also:
//!
//! * **tracks device state.** The first [`Error::DeviceLost`] or [`Error::InvariantViolated`]
//!   any call sees marks the device broken ([`Validated::mark_broken`]); from then on every call
//!   returns `DeviceLost` at once (except `free_block`, which must stay able to release memory);
//! * **records in-flight uses** of every copy, fill and dispatch, so [`Validated::last_use`] can
//!   tell a free which unfinished ticket still touches a range, whoever issued the work.
//!
//! [`Runtime`](crate::Runtime) always puts one in front of the backend it is given.
//!
//! # Limits
//! * Blocks allocated on the backend outside the front (before it was created, or through a
//!   backend's own API such as CUDA's expandable blocks) are unknown to it: ranges in them are
//!   refused with [`Error::UnknownBlock`].
//! * In-flight uses are kept per range until their ticket is seen complete; a free looks them up
//!   in time linear in the number of unfinished uses (pruned at every wait and every
//!   4096 recorded uses).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll};

use crate::backend::{
    Backend, BlockDesc, BlockId, BlockRange, BlockTable, Capabilities, Extensions, Growable,
    Managed, MappedAccess, Peer, Ticket,
};
use crate::ops::Op;
use crate::{Error, Result};

mod checks;
mod direct;
mod dispatch;
mod growth;
mod holes;
mod lanes;
mod limits;
mod rules;
pub(crate) mod split;
mod uses;

pub use limits::DeviceLimits;
use uses::InFlight;

/// Uses recorded before the front asks the backend which tickets completed, to forget theirs.
const USES_REFRESH: usize = 4096;

/// Shadow state of the device, behind one lock (never held across a backend call).
struct State {
    blocks: BlockTable<()>,
    /// Reservation in bytes of every live block from `reserve_block` (its table size is the
    /// committed size).
    reserved: HashMap<BlockId, u64>,
    uses: InFlight,
    /// Uses of unfinished transfer-lane work, numbered by transfer ticket, until a joined compute
    /// ticket covers them (then they move to `uses`).
    transfer_uses: InFlight,
    /// Highest ticket any call returned.
    issued: Ticket,
    /// Highest transfer ticket any call returned.
    transfer_issued: crate::backend::TransferTicket,
}

/// The validating front. See the module doc.
pub struct Validated {
    backend: Arc<dyn Backend>,
    /// The backend's capabilities, lowered by the [`DeviceLimits`] given.
    caps: Capabilities,
    state: Mutex<State>,
    /// Why the device is unusable, once it is.
    broken: OnceLock<String>,
    /// The limit of a wait that names none ([`Backend::wait_timeout`]); `None` defers to the backend.
    #[cfg(not(target_arch = "wasm32"))]
    wait_timeout: Option<std::time::Duration>,
}

impl Validated {
    /// A front over `backend`. Blocks allocated on `backend` before (not through the front) are
    /// unknown to it.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        let name = backend.capabilities().backend;
        Validated {
            caps: backend.capabilities().clone(),
            backend,
            state: Mutex::new(State {
                blocks: BlockTable::new(name),
                reserved: HashMap::new(),
                uses: InFlight::default(),
                transfer_uses: InFlight::default(),
                issued: Ticket::DONE,
                transfer_issued: crate::backend::TransferTicket::DONE,
            }),
            broken: OnceLock::new(),
            #[cfg(not(target_arch = "wasm32"))]
            wait_timeout: None,
        }
    }

    /// Sets the limit of every wait through the front that names none: the pools' and the
    /// runtime's waits ([`Backend::wait_timeout`]). `None` (the default) keeps the backend's own default.
    #[cfg(not(target_arch = "wasm32"))]
    #[must_use]
    pub fn with_wait_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// Lowers the limits the front reports and enforces (see [`DeviceLimits`]); the pools and
    /// the runtime above read them from [`Backend::capabilities`] of the front.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid) for a limit below the binding
    /// alignment, [`Error::Misaligned`] for a block limit that is not a multiple of the copy
    /// alignment.
    pub fn with_limits(mut self, limits: DeviceLimits) -> Result<Self> {
        self.caps = limits.apply(self.backend.capabilities())?;
        Ok(self)
    }

    /// The backend behind the front.
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is updated in single statements; a panic elsewhere cannot leave it half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the device broken (the first reason sticks) and returns `error` for the caller to
    /// report. The runtime routes its internal invariant violations here too.
    pub fn mark_broken(&self, error: Error) -> Error {
        let _ = self.broken.set(error.to_string());
        error
    }

    /// Whether a fatal error was seen: every later call returns [`Error::DeviceLost`].
    pub fn is_broken(&self) -> bool {
        self.broken.get().is_some()
    }

    /// `Ok` while the device is usable.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] with the first fatal error's message.
    pub fn check_alive(&self) -> Result<()> {
        match self.broken.get() {
            None => Ok(()),
            Some(reason) => Err(Error::DeviceLost {
                backend: self.backend.capabilities().backend,
                detail: reason.clone(),
            }),
        }
    }

    /// Passes `result` through, marking the device broken on a fatal error.
    fn observe<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| if e.is_fatal() { self.mark_broken(e) } else { e })
    }

    /// Records the uses of a submission and the ticket it returned.
    fn issued(&self, ticket: Ticket, ranges: &[BlockRange]) {
        let refresh = {
            let mut st = self.lock();
            st.issued = st.issued.max(ticket);
            st.uses.record(ticket, ranges);
            st.uses.len() >= USES_REFRESH
        };
        if refresh {
            let _ = self.completed();
        }
    }

    /// The latest unfinished ticket of work (through this front) that touches `range`, or
    /// [`Ticket::DONE`]. A pool that frees `range` must defer the free to it. Unfinished
    /// transfer-lane work on the range is joined first ([`TransferLanes::compute_after`](crate::backend::TransferLanes::compute_after)), and
    /// the joined ticket counts as its use.
    ///
    /// # Errors
    /// As [`TransferLanes::compute_after`](crate::backend::TransferLanes::compute_after), when a join is needed.
    pub fn last_use(&self, range: &BlockRange) -> Result<Ticket> {
        let transfer = self.lock().transfer_uses.last_use(range);
        if transfer > Ticket::DONE {
            self.compute_after_checked(crate::backend::TransferTicket(transfer.0))?;
        }
        Ok(self.lock().uses.last_use(range))
    }

    /// Whether unfinished work (through this front) on either lane touches `block`.
    pub fn block_in_use(&self, block: BlockId) -> bool {
        let st = self.lock();
        st.uses.touches(block) || st.transfer_uses.touches(block)
    }
}

impl Backend for Validated {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        self.check_alive()?;
        let caps = self.capabilities();
        Error::check_block_size(desc.size, caps.max_block_size)?;
        rules::aligned("block size", desc.size, caps.copy_align, "copy_align")?;
        self.check_managed(desc.kind, "managed blocks")?;
        let id = self.observe(self.backend.alloc_block(desc))?;
        let mirrored = self.lock().blocks.insert_as(id, desc.kind, desc.size, ());
        mirrored.map_err(|e| self.mark_broken(e))?;
        Ok(id)
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        self.lock().blocks.get(block)?;
        self.observe(self.backend.free_block(block))?;
        let mut st = self.lock();
        let _ = st.blocks.remove(block);
        st.reserved.remove(&block);
        Ok(())
    }

    fn extensions(&self) -> Extensions<'_> {
        Extensions {
            growable: self.growth().map(|_| self as &dyn Growable),
            transfer_lanes: Some(self),
            managed: self.backend.managed().map(|_| self as &dyn Managed),
            peer: self.backend.peer().map(|_| self as &dyn Peer),
        }
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        self.check_mapped(block, offset, data.len(), "mapped write")?;
        self.observe(self.backend.write_mapped(block, offset, data))
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_mapped(block, offset, out.len(), "mapped read")?;
        self.observe(self.backend.read_mapped(block, offset, out))
    }

    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        self.check_alive()?;
        if dst.size != data.len() as u64 {
            return Err(Error::SizeMismatch {
                what: "queued write range and data".into(),
                expected: dst.size,
                actual: data.len() as u64,
            });
        }
        {
            let st = self.lock();
            let entry =
                rules::transfer_range(&st.blocks, self.capabilities(), dst, "queued write")?;
            rules::kind_for(entry, &dst, "queued write target")?;
        }
        let ticket = self.observe(self.backend.write_queued(dst, data))?;
        if let Some(t) = ticket {
            self.issued(t, &[dst]);
        }
        Ok(ticket)
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.check_copy(src, dst)?;
        let t = self.observe(self.backend.copy(src, dst))?;
        self.issued(t, &[src, dst]);
        Ok(t)
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.check_fill(range)?;
        let t = self.observe(self.backend.fill_zero(range))?;
        self.issued(t, &[range]);
        Ok(t)
    }

    /// An op with an operand beyond `max_binding_size` runs as several dispatches over row
    /// ranges when it can be split (`split`); all parts are validated before any is issued, and
    /// the last part's ticket covers them all (tickets complete in order).
    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        self.check_alive()?;
        let caps = self.capabilities();
        let limit = caps.max_binding_size;
        let parts = if bindings.iter().any(|b| b.size > limit) {
            split::split(op, bindings, limit, caps.binding_align)
        } else {
            None
        };
        let Some(parts) = parts else {
            rules::bindings(&self.lock().blocks, caps, op, bindings, limit)?;
            let t = self.observe(self.backend.dispatch(op, bindings))?;
            self.issued(t, bindings);
            return Ok(t);
        };
        rules::bindings(&self.lock().blocks, caps, op, bindings, u64::MAX)?;
        self.issue_parts(&parts)
    }

    fn flush(&self) -> Result<Ticket> {
        self.check_alive()?;
        let t = self.observe(self.backend.flush())?;
        let mut st = self.lock();
        st.issued = st.issued.max(t);
        Ok(t)
    }

    fn completed(&self) -> Result<Ticket> {
        self.check_alive()?;
        let t = self.observe(self.backend.completed())?;
        self.lock().uses.completed(t);
        Ok(t)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<std::time::Duration>) -> Result<()> {
        self.check_issued(ticket)?;
        let timeout = timeout.or(self.wait_timeout);
        self.observe(self.backend.wait_timeout(ticket, timeout))?;
        self.lock().uses.completed(ticket);
        Ok(())
    }

    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check_issued(ticket) {
            return Poll::Ready(Err(e));
        }
        self.backend.poll_ticket(ticket, cx).map(|r| {
            self.observe(r)?;
            self.lock().uses.completed(ticket);
            Ok(())
        })
    }

    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let checked = self.check_alive().and_then(|()| {
            let st = self.lock();
            let entry = st.blocks.get(request.block)?;
            let whole = BlockRange {
                block: request.block,
                offset: 0,
                size: entry.size,
            };
            rules::host_visible(entry, self.capabilities(), whole)
        });
        if let Err(e) = checked {
            return Poll::Ready(Err(e));
        }
        self.backend
            .poll_host_access(request, cx)
            .map(|r| self.observe(r))
    }
}

#[cfg(test)]
mod tests;
