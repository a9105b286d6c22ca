//! The backend's blocks: one native allocation each, and the table that names them.
//!
//! Four kinds of native memory back a block:
//!
//! * device memory from `cuMemAlloc`, or stream-ordered `cuMemAllocFromPoolAsync` from the
//!   backend's own memory pool ([`crate::DeviceAlloc`]);
//! * pinned host memory from `cuMemHostAlloc` (write-combined for `Upload`, cached for
//!   `Readback`; see `conv.rs`), or, on a NUMA machine, mapped by the backend, bound to the
//!   device's node and registered (`numa.rs`). Under unified addressing, which the backend
//!   requires, its host pointer is also its device address, so copies and kernels take it like
//!   device memory;
//! * an expandable segment (`vmm.rs`), device memory that grows in place;
//! * managed memory from `cuMemAllocManaged` (`managed.rs`): one address the host and the device
//!   both use, which is also its host pointer.
//!
//! The table is core's shared [`tensormem_contract::BlockTable`] (ids never reused, typed errors), with a
//! [`Block`] as each entry's payload; an expandable block's entry size follows its mapped size.

use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::{result, sys};
use tensormem_contract::{BlockId, Error, MemoryKind, Result};

use crate::vmm::ExpandableSegment;

/// Pinned host memory: from `cuMemHostAlloc`, or mapped and registered (`numa.rs`).
#[derive(Debug)]
pub(crate) struct PinnedHost {
    ptr: NonNull<u8>,
    /// `Some(mapped length)` for memory the backend mapped, bound to a NUMA node and registered
    /// (`numa::alloc_registered`); `None` for `cuMemHostAlloc`.
    registered: Option<usize>,
}

impl PinnedHost {
    /// The host pointer as an address (also the device address, under unified addressing).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
}

// SAFETY: the pointer names process-wide page-locked memory owned by this value alone; every
// access goes through the block table's mutex or happens while the caller guarantees (by the
// backend contract) that no other access to the range is in flight.
unsafe impl Send for PinnedHost {}

/// What backs a block.
#[derive(Debug)]
pub(crate) enum Memory {
    /// `cuMemAlloc` (`pool == false`) or `cuMemAllocFromPoolAsync` (`pool == true`).
    Device {
        /// Device address.
        ptr: sys::CUdeviceptr,
        /// Whether it came from the stream-ordered pool (freed with `cuMemFreeAsync`).
        pool: bool,
    },
    /// Pinned host memory.
    Pinned(PinnedHost),
    /// A VMM segment that grows in place.
    Expandable(ExpandableSegment),
    /// `cuMemAllocManaged` (attached globally): the address is valid on the host and the device.
    Managed {
        /// The unified address.
        ptr: sys::CUdeviceptr,
    },
}

/// One live block.
#[derive(Debug)]
pub(crate) struct Block {
    /// The kind it was allocated as.
    pub kind: MemoryKind,
    /// Size in bytes as allocated (for expandable blocks, see [`Block::size`]).
    size: u64,
    /// The native memory.
    pub memory: Memory,
    /// The caller's label, kept for leak reports.
    pub label: String,
}

impl Block {
    /// A block over `memory` of `size` bytes.
    pub(crate) fn new(kind: MemoryKind, size: u64, memory: Memory, label: &str) -> Self {
        Block {
            kind,
            size,
            memory,
            label: label.to_string(),
        }
    }

    /// Usable size in bytes: the allocation size, or the mapped size of an expandable block.
    pub(crate) fn size(&self) -> u64 {
        match &self.memory {
            Memory::Expandable(seg) => seg.mapped(),
            _ => self.size,
        }
    }

    /// The block's address in the unified address space (device address; for pinned host
    /// memory, its host pointer).
    pub(crate) fn device_addr(&self) -> u64 {
        match &self.memory {
            Memory::Device { ptr, .. } => *ptr,
            Memory::Pinned(p) => p.ptr.as_ptr() as u64,
            Memory::Expandable(seg) => seg.base(),
            Memory::Managed { ptr } => *ptr,
        }
    }

    /// The host pointer of a host-visible block.
    pub(crate) fn host_ptr(&self) -> Option<NonNull<u8>> {
        match &self.memory {
            Memory::Pinned(p) => Some(p.ptr),
            Memory::Managed { ptr } => NonNull::new(*ptr as *mut u8),
            _ => None,
        }
    }
}

/// The driver call behind [`alloc_pinned`] for `node`, for error messages.
pub(crate) fn pinned_api(node: Option<u32>) -> &'static str {
    match node {
        Some(_) => "mmap + mbind + cuMemHostRegister",
        None => "cuMemHostAlloc",
    }
}

/// Allocates `size` bytes of pinned host memory: with `CU_MEMHOSTALLOC_*` `flags` from the
/// driver, or, with a NUMA `node` (Linux), mapped, bound to it and registered (`flags` do not
/// apply: registered memory is never write-combined).
///
/// # Errors
/// The driver error, for the caller to map (it knows the kind and the budget).
pub(crate) fn alloc_pinned(
    size: usize,
    flags: u32,
    node: Option<u32>,
) -> std::result::Result<Memory, result::DriverError> {
    #[cfg(target_os = "linux")]
    if let Some(node) = node {
        let (ptr, len) = crate::numa::alloc_registered(size, node)?;
        return Ok(Memory::Pinned(PinnedHost {
            ptr,
            registered: Some(len),
        }));
    }
    let _ = node;
    // SAFETY: cuMemHostAlloc returns fresh page-locked memory or an error; the caller made the
    // context current. The contents are uninitialised bytes, which `u8` tolerates.
    let raw = unsafe { result::malloc_host(size, flags) }?;
    match NonNull::new(raw.cast::<u8>()) {
        Some(ptr) => Ok(Memory::Pinned(PinnedHost {
            ptr,
            registered: None,
        })),
        None => Err(result::DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
    }
}

/// Frees a block's native memory. Pool blocks are freed in stream order on `stream`.
///
/// # Safety
/// No in-flight work may use the block unless it was enqueued on `stream` before this call
/// (the backend contract: the caller waited for the block's tickets), and the block is not used
/// afterwards.
pub(crate) unsafe fn free_memory(memory: &mut Memory, stream: sys::CUstream) -> Result<()> {
    use crate::error::map_driver_err;
    match memory {
        Memory::Device { ptr, pool: false } => {
            // SAFETY: `ptr` came from cuMemAlloc and is freed once (the block leaves the table).
            unsafe { result::free_sync(*ptr) }.map_err(|e| map_driver_err("cuMemFree", e))
        }
        Memory::Device { ptr, pool: true } => {
            // SAFETY: `ptr` came from cuMemAllocFromPoolAsync; freeing in stream order after all
            // work enqueued on `stream` is what the stream-ordered allocator requires.
            unsafe { result::free_async(*ptr, stream) }
                .map_err(|e| map_driver_err("cuMemFreeAsync", e))
        }
        #[cfg(target_os = "linux")]
        Memory::Pinned(PinnedHost {
            ptr,
            registered: Some(len),
        }) => {
            // SAFETY: the pointer and length came from one `alloc_registered` and are freed once.
            unsafe { crate::numa::free_registered(*ptr, *len) }
                .map_err(|e| map_driver_err("cuMemHostUnregister", e))
        }
        Memory::Pinned(p) => {
            // SAFETY: the pointer came from cuMemHostAlloc (registered memory is handled above:
            // `registered` is only ever `Some` on Linux) and is freed once.
            unsafe { result::free_host(p.ptr.as_ptr().cast::<c_void>()) }
                .map_err(|e| map_driver_err("cuMemFreeHost", e))
        }
        Memory::Expandable(seg) => seg.release(),
        Memory::Managed { ptr } => {
            // SAFETY: `ptr` came from cuMemAllocManaged and is freed once; cuMemFree takes it.
            unsafe { result::free_sync(*ptr) }.map_err(|e| map_driver_err("cuMemFree", e))
        }
    }
}

/// Live blocks by id: core's shared table with [`Block`] payloads.
pub(crate) type BlockTable = tensormem_contract::BlockTable<Block>;

/// Empties `table`, handing every block's memory to `free` and going on past failures (teardown:
/// one block that cannot be freed, or a lost device, must not leak the others). Returns the
/// blocks whose free failed, with the error.
pub(crate) fn release_all(
    table: &mut BlockTable,
    mut free: impl FnMut(&mut Memory) -> Result<()>,
) -> Vec<(BlockId, Error)> {
    let mut failed = Vec::new();
    for (id, mut entry) in table.drain() {
        if let Err(e) = free(&mut entry.native.memory) {
            failed.push((id, e));
        }
    }
    failed
}

#[cfg(test)]
mod tests;
