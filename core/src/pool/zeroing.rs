//! The zero-on-reuse adaptor: every allocation of the pool below is cleared before it is handed
//! out, so no allocation sees bytes another one left behind (what WebGPU guarantees for fresh
//! buffers).
//!
//! Device memory is cleared with one [`Backend::fill_zero`], queued like any device work: the
//! allocation's last use becomes the fill's ticket, so later work is ordered after it and nothing
//! blocks. Host-visible memory is cleared through mapping, synchronously. Costs one fill per
//! allocation; a pool without this adaptor pays nothing.

use std::sync::Arc;

use crate::Result;
use crate::backend::{Backend, BlockRange, MemoryKind, Ticket};
use crate::pool::device_pool::{self, Allocation, DevicePool};

/// Clears every allocation of the pool below before handing it out. See the module doc.
pub struct ZeroOnReuse<P> {
    inner: P,
    backend: Arc<dyn Backend>,
    kind: MemoryKind,
}

impl<P: DevicePool> ZeroOnReuse<P> {
    /// Zeroes the allocations of `inner`, whose blocks are of `kind` on `backend`.
    pub fn new(inner: P, backend: Arc<dyn Backend>, kind: MemoryKind) -> Self {
        ZeroOnReuse {
            inner,
            backend,
            kind,
        }
    }

    /// Clears `range`; the ticket after which the zeros are in place for device work.
    fn zero(&self, range: BlockRange) -> Result<Ticket> {
        if self.kind == MemoryKind::DeviceLocal {
            return self.backend.fill_zero(range);
        }
        const CHUNK: usize = 1 << 20;
        let zeros = vec![0u8; CHUNK.min(range.size as usize)];
        let mut off = 0;
        while off < range.size {
            let n = (range.size - off).min(zeros.len() as u64);
            self.backend
                .write_mapped(range.block, range.offset + off, &zeros[..n as usize])?;
            off += n;
        }
        Ok(Ticket::DONE)
    }
}

/// Only allocating changes: the rest passes through.
impl<P: DevicePool> device_pool::PoolAdaptor for ZeroOnReuse<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        &self.inner
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        let a = self.inner.allocate(size, align, label)?;
        match self.zero(a.range) {
            Ok(t) => {
                if let Err(e) = self.inner.mark_used(a.handle, t) {
                    // The fill is queued: the bytes return only after it.
                    self.inner.free_after(a.handle, t)?;
                    return Err(e);
                }
                Ok(a)
            }
            Err(e) => {
                // Nothing was queued and nothing handed out: undo the carve (the conformance
                // case `a_failed_allocate_holds_nothing`).
                self.inner.cancel(a.handle)?;
                Err(e)
            }
        }
    }
}
