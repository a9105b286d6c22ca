//! The tracing adaptor: records a pool's allocations and frees into a [`Tracer`], and, through the
//! [`PoolListener`] it installs on the pool below, the blocks reserved and released and the frees
//! reclaimed after in-flight work (see [`crate::trace`]).
//!
//! Trace ids are issued by the tracer and kept here, keyed by handle; allocations made before the
//! adaptor was put on the stack have none and are not traced. A pool without this adaptor pays
//! nothing for tracing. One listener per bottom pool: a second tracing adaptor over the same pool
//! takes the events over from the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::{BlockId, Ticket};
use crate::pool::device_pool::{self, Allocation, DevicePool, PoolListener};
use crate::pool::slots::Handle;
use crate::pool::{Expandable, ExpandableDesc};
use crate::trace::{EventKind, Tracer, TransferKind};
use crate::{Error, Result};

/// The tracer and the trace id of every traced live allocation (shared with the listener and the
/// leak report, which prints each leak's backtrace).
pub struct TraceIds {
    tracer: Tracer,
    ids: Mutex<HashMap<Handle, u64>>,
}

impl TraceIds {
    fn ids(&self) -> MutexGuard<'_, HashMap<Handle, u64>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tracer.
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// The allocation's trace id (0 when it is not traced).
    pub fn id(&self, handle: Handle) -> u64 {
        self.ids().get(&handle).copied().unwrap_or(0)
    }

    /// Where the allocation was made, when the tracer records backtraces.
    pub fn backtrace_of(&self, handle: Handle) -> Option<String> {
        let id = self.id(handle);
        (id != 0).then(|| self.tracer.backtrace_of(id)).flatten()
    }
}

impl PoolListener for TraceIds {
    fn block_reserved(&self, pool: &str, block: BlockId, size: u64) {
        self.tracer.record(EventKind::BlockReserve {
            pool: pool.to_string(),
            block: block.0,
            size,
        });
    }

    fn block_released(&self, pool: &str, block: BlockId, size: u64) {
        self.tracer.record(EventKind::BlockRelease {
            pool: pool.to_string(),
            block: block.0,
            size,
        });
    }

    fn reclaimed(&self, handle: Handle) {
        if let Some(id) = self.ids().remove(&handle) {
            self.tracer.record(EventKind::FreeReclaimed { id });
        }
    }

    fn transferred(&self, handle: Handle, kind: TransferKind, size: u64) {
        let id = self.id(handle);
        if id == 0 {
            return;
        }
        let (from, to) = if kind == TransferKind::Restore {
            (0, id)
        } else {
            (id, 0)
        };
        self.tracer.record(EventKind::Transfer {
            from,
            to,
            size,
            kind,
        });
    }
}

/// A pool whose allocations and frees are traced. See the module doc.
pub struct Traced<P> {
    inner: P,
    ids: Arc<TraceIds>,
}

impl<P: DevicePool> Traced<P> {
    /// Traces `inner` into `tracer`, installing the listener for block and reclaim events on it.
    pub fn new(inner: P, tracer: Tracer) -> Self {
        let ids = Arc::new(TraceIds {
            tracer,
            ids: Mutex::new(HashMap::new()),
        });
        inner.set_listener(Some(ids.clone()));
        Traced { inner, ids }
    }

    /// The tracer and the trace ids.
    pub fn ids(&self) -> &Arc<TraceIds> {
        &self.ids
    }

    /// Records a new allocation under a new trace id.
    fn record_alloc(&self, a: &Allocation, label: &str) {
        let id = self.ids.tracer.next_id();
        self.ids.ids().insert(a.handle, id);
        self.ids.tracer.record(EventKind::Alloc {
            id,
            pool: self.inner.name().to_string(),
            size: a.range.size,
            offset: a.range.offset,
            label: label.to_string(),
            parent: None,
        });
    }
}

/// Allocating, freeing and cancelling are recorded; the rest passes through.
impl<P: DevicePool> device_pool::PoolAdaptor for Traced<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        &self.inner
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let a = self.inner.allocate(size, align, label)?;
        self.record_alloc(&a, label);
        Ok(a)
    }

    fn expandable(&self) -> Option<&dyn Expandable> {
        self.inner.expandable().map(|_| self as &dyn Expandable)
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        // Only a live handle's free is recorded (a double free records nothing); the request
        // comes before the reclaim the inner pool may report at once.
        if self.inner.last_use(handle).is_ok() {
            let id = self.ids.id(handle);
            if id != 0 {
                self.ids.tracer.record(EventKind::FreeRequested { id });
            }
        }
        self.inner.free_after(handle, ticket)
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        // A cancelled allocation never existed for its owner: its trace closes at once.
        let id = self.ids.id(handle);
        if id != 0 && self.inner.last_use(handle).is_ok() {
            self.ids.tracer.record(EventKind::FreeRequested { id });
        }
        self.inner.cancel(handle)?;
        // The listener reported the reclaim unless the pool below has none.
        if let Some(id) = self.ids.ids().remove(&handle) {
            self.ids.tracer.record(EventKind::FreeReclaimed { id });
        }
        Ok(())
    }
}

/// An expandable allocation is traced like any other; a growth closes its trace and opens one
/// of the new size at the same offset, so the timeline shows the bytes it holds at every time.
impl<P: DevicePool> Expandable for Traced<P> {
    fn allocate_expandable(&self, desc: &ExpandableDesc<'_>) -> Result<Option<Allocation>> {
        let Some(inner) = self.inner.expandable() else {
            return Ok(None);
        };
        let a = inner.allocate_expandable(desc)?;
        if let Some(a) = &a {
            self.record_alloc(a, desc.label);
        }
        Ok(a)
    }

    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation> {
        let inner = self
            .inner
            .expandable()
            .ok_or_else(|| Error::invariant("an expandable pool below the tracing", "none"))?;
        let a = inner.expand(handle, size)?;
        if let Some(id) = self.ids.ids().remove(&handle) {
            self.ids.tracer.record(EventKind::FreeRequested { id });
            self.ids.tracer.record(EventKind::FreeReclaimed { id });
            let label = self.inner.label(handle).unwrap_or_default();
            self.record_alloc(&a, &label);
        }
        Ok(a)
    }
}
