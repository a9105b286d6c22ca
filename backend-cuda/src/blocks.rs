//! The backend's blocks: one native allocation each, and the table that names them.
//!
//! Three kinds of native memory back a block:
//!
//! * device memory from `cuMemAlloc`, or stream-ordered `cuMemAllocFromPoolAsync` from the
//!   backend's own memory pool ([`crate::DeviceAlloc`]);
//! * pinned host memory from `cuMemHostAlloc` (write-combined for `Upload`, cached for
//!   `Readback`; see `conv.rs`). Under unified addressing, which the backend requires, its host
//!   pointer is also its device address, so copies and kernels take it like device memory;
//! * an expandable segment (`vmm.rs`), device memory that grows in place.
//!
//! Block ids are never reused (a `u64` counter), so a stale id is reported as unknown rather than
//! silently naming a newer block.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::{result, sys};
use tensormem::{BlockId, Error, MemoryKind, Result};

use crate::vmm::ExpandableSegment;

/// Pinned host memory from `cuMemHostAlloc`.
#[derive(Debug)]
pub(crate) struct PinnedHost {
    ptr: NonNull<u8>,
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
    /// `cuMemHostAlloc`.
    Pinned(PinnedHost),
    /// A VMM segment that grows in place.
    Expandable(ExpandableSegment),
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
        }
    }

    /// The host pointer of a host-visible block.
    pub(crate) fn host_ptr(&self) -> Option<NonNull<u8>> {
        match &self.memory {
            Memory::Pinned(p) => Some(p.ptr),
            _ => None,
        }
    }
}

/// Allocates `size` bytes of pinned host memory with `CU_MEMHOSTALLOC_*` `flags`.
///
/// # Errors
/// The driver error, for the caller to map (it knows the kind and the budget).
pub(crate) fn alloc_pinned(
    size: usize,
    flags: u32,
) -> std::result::Result<Memory, result::DriverError> {
    // SAFETY: cuMemHostAlloc returns fresh page-locked memory or an error; the caller made the
    // context current. The contents are uninitialised bytes, which `u8` tolerates.
    let raw = unsafe { result::malloc_host(size, flags) }?;
    match NonNull::new(raw.cast::<u8>()) {
        Some(ptr) => Ok(Memory::Pinned(PinnedHost { ptr })),
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
        Memory::Pinned(p) => {
            // SAFETY: the pointer came from cuMemHostAlloc and is freed once.
            unsafe { result::free_host(p.ptr.as_ptr().cast::<c_void>()) }
                .map_err(|e| map_driver_err("cuMemFreeHost", e))
        }
        Memory::Expandable(seg) => seg.release(),
    }
}

/// Live blocks by id.
#[derive(Debug, Default)]
pub(crate) struct BlockTable {
    blocks: HashMap<u64, Block>,
    /// Last id handed out; ids start at 1 and are never reused.
    last_id: u64,
}

impl BlockTable {
    /// Adds a block and names it.
    pub(crate) fn insert(&mut self, block: Block) -> BlockId {
        self.last_id += 1;
        self.blocks.insert(self.last_id, block);
        BlockId(self.last_id)
    }

    /// The block named `id`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id that is not live (never issued, or freed).
    pub(crate) fn get(&self, id: BlockId) -> Result<&Block> {
        self.blocks.get(&id.0).ok_or_else(|| unknown(id))
    }

    /// The block named `id`, mutably.
    ///
    /// # Errors
    /// As [`BlockTable::get`].
    pub(crate) fn get_mut(&mut self, id: BlockId) -> Result<&mut Block> {
        self.blocks.get_mut(&id.0).ok_or_else(|| unknown(id))
    }

    /// Removes the block named `id` and returns it.
    ///
    /// # Errors
    /// As [`BlockTable::get`].
    pub(crate) fn remove(&mut self, id: BlockId) -> Result<Block> {
        self.blocks.remove(&id.0).ok_or_else(|| unknown(id))
    }

    /// Bytes held in live blocks of `kind`.
    pub(crate) fn bytes_of(&self, kind: MemoryKind) -> u64 {
        self.blocks
            .values()
            .filter(|b| b.kind == kind)
            .map(Block::size)
            .sum()
    }

    /// Every live block with its id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (BlockId, &Block)> {
        self.blocks.iter().map(|(id, b)| (BlockId(*id), b))
    }

    /// Empties the table, handing every block's memory to `free` and going on past failures
    /// (teardown: one block that cannot be freed, or a lost device, must not leak the others).
    /// Returns the blocks whose free failed, with the error.
    pub(crate) fn release_all(
        &mut self,
        mut free: impl FnMut(&mut Memory) -> Result<()>,
    ) -> Vec<(BlockId, Error)> {
        let mut failed = Vec::new();
        for (id, mut block) in self.blocks.drain() {
            if let Err(e) = free(&mut block.memory) {
                failed.push((BlockId(id), e));
            }
        }
        failed
    }
}

fn unknown(id: BlockId) -> Error {
    Error::invalid(format!(
        "cuda: block {} is not live (never allocated, or already freed)",
        id.0
    ))
}

#[cfg(test)]
mod tests;
