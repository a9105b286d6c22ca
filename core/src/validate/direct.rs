//! The front's checks of the optional paths: managed memory ([`Managed::prefetch`], managed
//! allocations) and direct copies between two backends ([`Peer::copy_to_peer`]). The front
//! offers each exactly where the backend behind it does.

use std::any::Any;
use std::ptr;

use super::{Validated, rules};
use crate::backend::{
    Backend, BlockRange, Managed, ManagedMemory, MemoryKind, Peer, PeerCopy, PeerRanges, Residence,
    Ticket, managed,
};
use crate::{Error, Result};

impl Managed for Validated {
    fn managed_memory(&self) -> ManagedMemory {
        managed::memory_of(self.backend.as_ref())
    }

    fn prefetch(&self, range: BlockRange, to: Residence) -> Result<Ticket> {
        self.prefetch_checked(range, to)
    }
}

impl Peer for Validated {
    fn copy_to_peer(&self, peer: &dyn Backend, ranges: PeerRanges) -> Result<Option<PeerCopy>> {
        self.copy_to_peer_checked(peer, ranges)
    }
}

impl Validated {
    /// Refuses [`MemoryKind::Managed`] where the backend has no managed memory, so every backend
    /// answers the same error without having to map the kind.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `what`.
    pub(super) fn check_managed(&self, kind: MemoryKind, what: &str) -> Result<()> {
        if kind == MemoryKind::Managed && !managed::memory_of(self.backend.as_ref()).supported() {
            return Err(Error::Unsupported {
                backend: self.capabilities().backend,
                what: format!("{what} (the device has no managed memory)"),
            });
        }
        Ok(())
    }

    /// [`Managed::prefetch`]: a live, in-bounds range of a managed block.
    fn prefetch_checked(&self, range: BlockRange, to: Residence) -> Result<Ticket> {
        self.check_alive()?;
        self.check_managed(MemoryKind::Managed, "prefetching")?;
        {
            let st = self.lock();
            let entry = rules::transfer_range(&st.blocks, self.capabilities(), range, "prefetch")?;
            rules::kind_for(entry, &range, "prefetch")?;
        }
        let t = self.observe(managed::prefetch(self.backend.as_ref(), range, to))?;
        if t != Ticket::DONE {
            self.issued(t, &[range]);
        }
        Ok(t)
    }

    /// [`Peer::copy_to_peer`]: the source is checked here and the destination by the peer's
    /// own front when the peer is one (a runtime's backend always is); the inner backends then
    /// see each other, so a backend recognises a peer of its own type. Both uses are recorded,
    /// each on its own timeline.
    fn copy_to_peer_checked(
        &self,
        peer: &dyn Backend,
        ranges: PeerRanges,
    ) -> Result<Option<PeerCopy>> {
        let PeerRanges { src, dst } = ranges;
        self.check_alive()?;
        if src.size != dst.size {
            return Err(Error::SizeMismatch {
                what: "peer copy source and destination".into(),
                expected: src.size,
                actual: dst.size,
            });
        }
        {
            let st = self.lock();
            let from = rules::transfer_range(&st.blocks, self.capabilities(), src, "copy source")?;
            rules::kind_for(from, &src, "copy source")?;
        }
        let any: &dyn Any = peer;
        let front = any.downcast_ref::<Validated>();
        let inner: &dyn Backend = match front {
            Some(f) => {
                f.check_alive()?;
                let st = f.lock();
                let to =
                    rules::transfer_range(&st.blocks, f.capabilities(), dst, "copy destination")?;
                rules::kind_for(to, &dst, "copy destination")?;
                f.backend.as_ref()
            }
            None => peer,
        };
        if front.is_some_and(|f| ptr::eq(f, self)) {
            rules::disjoint(&src, &dst, || "peer copy source and destination".into())?;
        }
        let copied = match self.backend.peer() {
            Some(p) => self.observe(p.copy_to_peer(inner, ranges)),
            None => Ok(None),
        };
        let copied = match front {
            Some(f) => copied.map_err(|e| if e.is_fatal() { f.mark_broken(e) } else { e })?,
            None => copied?,
        };
        if let Some(c) = copied {
            self.issued(c.src_ticket, &[src]);
            if let Some(f) = front {
                f.issued(c.dst_ticket, &[dst]);
            }
        }
        Ok(copied)
    }
}

#[cfg(test)]
mod tests;
