//! Pure mappings between core's vocabulary and CUDA's: memory kinds to placements and
//! `cuMemHostAlloc` flags, checked `u64` ↔ `usize`
//! conversions and block-range checks.
//!
//! Nothing here calls the driver, so every rule is unit-tested on a machine without a GPU
//! (`conv/tests.rs`), as wgpu-hal keeps its `conv.rs` free of device calls.

use cudarc::driver::sys;
use tensormem_contract::{Error, MemoryKind, Result};

/// Where a block of a given [`MemoryKind`] lives on CUDA.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Device memory (`cuMemAlloc` or `cuMemAllocAsync`); not host-visible.
    Device,
    /// Page-locked host memory from `cuMemHostAlloc` with these flags. Under unified addressing
    /// its host pointer is also its device address, so copies and kernels use it directly.
    PinnedHost {
        /// `CU_MEMHOSTALLOC_*` flags.
        flags: u32,
    },
    /// Managed memory from `cuMemAllocManaged` (`managed.rs`): one address for host and device,
    /// pages migrated by the driver.
    Managed,
}

impl Placement {
    /// Whether the host can read and write the block directly (`write_mapped`, `read_mapped`).
    pub(crate) fn host_visible(self) -> bool {
        matches!(self, Placement::PinnedHost { .. } | Placement::Managed)
    }
}

/// Maps a memory kind to its placement.
///
/// * `DeviceLocal` → device memory.
/// * `Upload` → pinned, **write-combined** host memory: the CPU writes it sequentially (a memcpy)
///   and the copy engine reads it over PCIe without snooping CPU caches; CPU reads from it are
///   very slow, which an upload never does.
/// * `Readback` → pinned, **cached** host memory (flags 0): the CPU reads it after the copy.
/// * `Managed` → managed memory, preferred on the device.
pub(crate) fn map_memory_kind(kind: MemoryKind) -> Placement {
    match kind {
        MemoryKind::Managed => Placement::Managed,
        MemoryKind::DeviceLocal => Placement::Device,
        MemoryKind::Upload => Placement::PinnedHost {
            flags: sys::CU_MEMHOSTALLOC_WRITECOMBINED,
        },
        MemoryKind::Readback => Placement::PinnedHost { flags: 0 },
    }
}

/// Converts a byte count or offset to `usize` for a driver call.
///
/// # Errors
/// [`Error::TooLarge`] when the value does not fit the host's address width (32-bit hosts).
pub(crate) fn to_usize(value: u64, what: &'static str) -> Result<usize> {
    usize::try_from(value).map_err(|_| Error::TooLarge {
        what,
        requested: value,
        limit: usize::MAX as u64,
        limit_name: "host address width",
    })
}

/// Checks that `offset .. offset + size` lies inside a block of `block_size` bytes.
///
/// # Errors
/// [`Error::OutOfBounds`] past the end (or on `u64` overflow of `offset + size`).
pub(crate) fn check_range(offset: u64, size: u64, block_size: u64) -> Result<()> {
    match offset.checked_add(size) {
        Some(end) if end <= block_size => Ok(()),
        _ => Err(Error::OutOfBounds {
            what: "block",
            offset,
            size,
            limit: block_size,
        }),
    }
}

/// `CU_STREAM_PER_THREAD`, the per-thread default stream's handle.
const STREAM_PER_THREAD: usize = 0x2;

/// Refuses a stream handle whose ordering the backend cannot rely on: the per-thread default
/// stream names a different stream on every thread, so two threads submitting "to the same
/// stream" would get tickets out of stream order. The legacy default stream (null or
/// `CU_STREAM_LEGACY`) is one stream for the whole context and is accepted.
///
/// # Errors
/// [`Error::Unsupported`] for `CU_STREAM_PER_THREAD`.
pub(crate) fn check_adoptable_stream(handle: usize) -> Result<()> {
    if handle == STREAM_PER_THREAD {
        return Err(Error::Unsupported {
            backend: "cuda",
            what: "adopt() of the per-thread default stream (CU_STREAM_PER_THREAD): each \
                   thread's handle names a different stream, which breaks ticket order across \
                   threads; create a stream (CudaContext::new_stream) and adopt that"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
