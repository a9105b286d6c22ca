//! The block table: one `wgpu::Buffer` per block, with its kind, size, map state and last use.
//!
//! Block ids are never reused (a `u64` counter), so a freed id is reported as unknown rather than
//! aliasing a newer block. Map state lives here because wgpu forbids using a mapped buffer in a
//! submission (or in `queue.write_buffer`): every path that hands a block to the GPU calls
//! [`Block::unmap`] first, and host access maps lazily again (see `mapping`).

use std::collections::HashMap;

use tensormem::{BlockId, Error, MemoryKind, Result};

use crate::mapping::PendingMap;

/// How a block's buffer is currently mapped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MapState {
    /// Not mapped: usable by the GPU.
    Unmapped,
    /// Mapped for reading (`MapMode::Read`).
    Read,
    /// Mapped for writing (`MapMode::Write`).
    Write,
}

/// One live block.
#[derive(Debug)]
pub(crate) struct Block {
    /// The native buffer; its size is `size` rounded up to `COPY_BUFFER_ALIGNMENT`.
    pub(crate) buffer: wgpu::Buffer,
    /// What the block is for.
    pub(crate) kind: MemoryKind,
    /// Size in bytes as requested; ranges are checked against it.
    pub(crate) size: u64,
    /// Current map state. Invariant: `Unmapped` whenever the block is referenced by unsubmitted
    /// or in-flight device work the backend encoded.
    pub(crate) map: MapState,
    /// Ticket of the last submission that uses the block (0: never used by the device).
    pub(crate) last_use: u64,
    /// A mapping started by `poll_host_access` and not yet observed complete. Invariant: `Some`
    /// only while `map` is `Unmapped`.
    pub(crate) pending: Option<PendingMap>,
}

impl Block {
    /// Unmaps the buffer if it is mapped (or cancels a pending mapping), so the GPU may use it.
    pub(crate) fn unmap(&mut self) {
        if self.map != MapState::Unmapped || self.pending.take().is_some() {
            self.buffer.unmap();
            self.map = MapState::Unmapped;
        }
    }

    /// Checks that `offset .. offset + size` lies inside the block.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] naming `what`, with overflow treated as out of bounds.
    pub(crate) fn check_range(&self, offset: u64, size: u64, what: &'static str) -> Result<()> {
        match offset.checked_add(size) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(Error::OutOfBounds {
                what,
                offset,
                size,
                limit: self.size,
            }),
        }
    }

    /// Whether the block's buffer can be mapped (host-visible).
    pub(crate) fn mappable(&self) -> bool {
        self.buffer
            .usage()
            .intersects(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE)
    }
}

/// Live blocks by id.
#[derive(Debug, Default)]
pub(crate) struct BlockTable {
    blocks: HashMap<u64, Block>,
    /// The id the next block gets; starts at 1 and only grows.
    next_id: u64,
}

impl BlockTable {
    /// Registers a new block and returns its id.
    pub(crate) fn insert(&mut self, buffer: wgpu::Buffer, kind: MemoryKind, size: u64) -> BlockId {
        self.next_id += 1;
        let id = self.next_id;
        self.blocks.insert(
            id,
            Block {
                buffer,
                kind,
                size,
                map: MapState::Unmapped,
                last_use: 0,
                pending: None,
            },
        );
        BlockId(id)
    }

    /// Removes a block, returning it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown (never issued or already freed) id.
    pub(crate) fn remove(&mut self, id: BlockId) -> Result<Block> {
        self.blocks.remove(&id.0).ok_or_else(|| unknown(id))
    }

    /// The block with this id.
    ///
    /// # Errors
    /// As [`BlockTable::remove`].
    pub(crate) fn get(&self, id: BlockId) -> Result<&Block> {
        self.blocks.get(&id.0).ok_or_else(|| unknown(id))
    }

    /// The block with this id, mutably.
    ///
    /// # Errors
    /// As [`BlockTable::remove`].
    pub(crate) fn get_mut(&mut self, id: BlockId) -> Result<&mut Block> {
        self.blocks.get_mut(&id.0).ok_or_else(|| unknown(id))
    }

    /// Number of live blocks.
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}

fn unknown(id: BlockId) -> Error {
    Error::invalid(format!(
        "wgpu: unknown block {} (never allocated or already freed)",
        id.0
    ))
}
