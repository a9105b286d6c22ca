//! Managed (unified) memory: one allocation that the host and the device both address, with the
//! driver keeping it where it is used; the optional capability a backend offers through
//! [`Extensions::managed`](crate::backend::Extensions::managed).
//!
//! A [`MemoryKind::Managed`](super::MemoryKind::Managed) block is bound by kernels, copied to and
//! from, and read or written by the host ([`Backend::read_mapped`] / [`Backend::write_mapped`])
//! like a host-visible block. What it costs depends on the platform, which
//! [`Managed::managed_memory`] states:
//!
//! * [`ManagedMemory::Migrating`] (CUDA `cuMemAllocManaged`): the pages migrate on first touch,
//!   by faults, which is slow; [`Managed::prefetch`] moves them ahead of use on the device's
//!   queue, in order with the rest of its work.
//! * [`ManagedMemory::SameMemory`] (the host backend, integrated GPUs, lavapipe): device memory
//!   already is host memory, so nothing ever moves and a prefetch is a no-op.
//! * No managed memory (discrete GPUs on Vulkan and WebGPU): [`Extensions::managed`](crate::backend::Extensions::managed) is `None`
//!   ([`memory_of`] answers [`ManagedMemory::Unsupported`]), and the front refuses the kind with
//!   [`Error::Unsupported`] before the backend sees it.
//!
//! The capability is a trait of its own, reached through one accessor, as
//! [`Growable`](super::Growable) is: a backend without managed memory writes nothing, and the
//! `Validated` (in `tensormem`) front offers it exactly where the backend behind it does,
//! checking every prefetch. A caller that holds no [`Managed`] has nothing to prefetch: no
//! managed block can exist.

use super::{Backend, BlockRange, Ticket};
use crate::{Error, Result};

/// Managed memory, reached through [`Extensions::managed`](crate::backend::Extensions::managed). See the module doc.
///
/// Every method keeps the contract of [`Backend`]: no panics, native failures mapped into
/// [`Error`], validated input.
pub trait Managed: Send + Sync {
    /// How the backend serves [`MemoryKind::Managed`](super::MemoryKind::Managed) blocks.
    /// Constant for the backend's lifetime; not `Unsupported` where [`Extensions::managed`](crate::backend::Extensions::managed) offers
    /// the capability.
    fn managed_memory(&self) -> ManagedMemory;

    /// Enqueues moving the pages of `range` (in a managed block) to `to`, in order with earlier
    /// work: a kernel enqueued later finds them on the device, and the host reads them without
    /// faults once the ticket completed. The default moves nothing, enqueues nothing and returns
    /// [`Ticket::DONE`]: right where [`ManagedMemory::SameMemory`].
    ///
    /// # Errors
    /// [`Error::WrongMemoryKind`] outside a managed block, [`Error::OutOfBounds`],
    /// [`Error::DeviceLost`].
    fn prefetch(&self, range: BlockRange, to: Residence) -> Result<Ticket> {
        let _ = (range, to);
        Ok(Ticket::DONE)
    }
}

/// How `backend` serves managed blocks: its [`Managed::managed_memory`], or
/// [`ManagedMemory::Unsupported`] where [`Extensions::managed`](crate::backend::Extensions::managed) is `None`.
pub fn memory_of(backend: &dyn Backend) -> ManagedMemory {
    backend
        .managed()
        .map_or(ManagedMemory::Unsupported, |m| m.managed_memory())
}

/// [`Managed::prefetch`] on `backend`.
///
/// # Errors
/// [`Error::Unsupported`] where [`Extensions::managed`](crate::backend::Extensions::managed) is `None`; as [`Managed::prefetch`].
pub fn prefetch(backend: &dyn Backend, range: BlockRange, to: Residence) -> Result<Ticket> {
    match backend.managed() {
        Some(m) => m.prefetch(range, to),
        None => Err(Error::Unsupported {
            backend: backend.capabilities().backend,
            what: "prefetching (the device has no managed memory)".into(),
        }),
    }
}

/// How a backend serves [`MemoryKind::Managed`](super::MemoryKind::Managed) blocks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ManagedMemory {
    /// No managed memory: allocations of the kind are refused ([`Extensions::managed`](crate::backend::Extensions::managed) is `None`).
    Unsupported,
    /// Device memory is host memory: managed blocks are ordinary device blocks the host maps,
    /// and nothing needs to move.
    SameMemory,
    /// The driver migrates pages between host and device on demand; prefetching ahead of use
    /// avoids the faults.
    Migrating,
}

impl ManagedMemory {
    /// Whether managed blocks can be allocated.
    pub fn supported(self) -> bool {
        self != ManagedMemory::Unsupported
    }

    /// Short lowercase name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            ManagedMemory::Unsupported => "unsupported",
            ManagedMemory::SameMemory => "same memory",
            ManagedMemory::Migrating => "migrating",
        }
    }
}

/// Where a prefetch moves managed memory to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Residence {
    /// The backend's device: before kernels or copies use the range.
    Device,
    /// Host memory: before the host reads it, or to free device memory (offload).
    Host,
}

impl Residence {
    /// Short lowercase name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Residence::Device => "device",
            Residence::Host => "host",
        }
    }
}
