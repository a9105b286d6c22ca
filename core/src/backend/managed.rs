//! Managed (unified) memory: one allocation that the host and the device both address, with the
//! driver keeping it where it is used.
//!
//! A [`MemoryKind::Managed`](super::MemoryKind::Managed) block is bound by kernels, copied to and
//! from, and read or written by the host ([`Backend::read_mapped`](super::Backend::read_mapped) /
//! [`Backend::write_mapped`](super::Backend::write_mapped)) like a host-visible block. What it
//! costs depends on the platform, which [`Backend::managed_memory`](super::Backend::managed_memory)
//! states:
//!
//! * [`ManagedMemory::Migrating`] (CUDA `cuMemAllocManaged`): the pages migrate on first touch,
//!   by faults, which is slow; [`Backend::prefetch`](super::Backend::prefetch) moves them ahead of
//!   use on the device's queue, in order with the rest of its work.
//! * [`ManagedMemory::SameMemory`] (the host backend, integrated GPUs, lavapipe): device memory
//!   already is host memory, so nothing ever moves and a prefetch is a no-op.
//! * [`ManagedMemory::Unsupported`] (discrete GPUs on Vulkan and WebGPU): the front refuses the
//!   kind with [`Error::Unsupported`](crate::Error::Unsupported) before the backend sees it.

/// How a backend serves [`MemoryKind::Managed`](super::MemoryKind::Managed) blocks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ManagedMemory {
    /// No managed memory: allocations of the kind are refused.
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
