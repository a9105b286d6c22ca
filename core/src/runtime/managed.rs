//! Managed memory through a runtime: a runtime whose device pool is of
//! [`MemoryKind::Managed`](crate::MemoryKind::Managed) (`RuntimeConfig::device.kind`) keeps its
//! tensors in memory the host and the device share, and [`Runtime::prefetch`] moves a tensor's
//! pages ahead of use: to the device before the kernels that read it, to the host before the
//! host reads it or to free device memory (an offloaded tensor).

use crate::Result;
use crate::backend::{Residence, Ticket, managed};
use crate::runtime::{Runtime, Tensor};

impl Runtime {
    /// Enqueues moving `tensor`'s pages to `to`, in order with the device's work, and records the
    /// use; returns its ticket ([`Ticket::DONE`] where nothing moves: device memory that is host
    /// memory).
    ///
    /// # Errors
    /// [`Error::WrongDevice`](crate::Error::WrongDevice) for another device's tensor,
    /// [`Error::StaleHandle`](crate::Error::StaleHandle) for a freed one,
    /// [`Error::WrongMemoryKind`](crate::Error::WrongMemoryKind) when the device pool is not
    /// managed, [`Error::Unsupported`](crate::Error::Unsupported) without managed memory.
    pub fn prefetch(&self, tensor: &Tensor, to: Residence) -> Result<Ticket> {
        self.check_device(tensor, || format!("prefetch to the {}", to.name()))?;
        let pool = self.device_pool();
        let mut last = Ticket::DONE;
        for (alloc, _, size) in tensor.pieces() {
            let (range, _lease) = self.sub_range(pool.as_ref(), alloc, 0, size, "prefetch")?;
            let ticket = managed::prefetch(self.backend().as_ref(), range, to)?;
            if ticket != Ticket::DONE {
                pool.mark_used(alloc.handle, ticket)?;
            }
            last = last.max(ticket);
        }
        Ok(last)
    }
}
