//! The wgpu state of one block: its `wgpu::Buffer`, map state and last use, as the payload of
//! core's shared [`tensormem_contract::BlockTable`] (which owns ids, bounds checks and their errors).
//!
//! Map state lives here because wgpu forbids using a mapped buffer in a
//! submission (or in `queue.write_buffer`): every path that hands a block to the GPU calls
//! [`Block::unmap`] first, and host access maps lazily again (see `mapping`).

pub(crate) mod mapping;

use tensormem_contract::MemoryKind;

use mapping::PendingMap;

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

    /// Whether the block's buffer can be mapped (host-visible).
    pub(crate) fn mappable(&self) -> bool {
        self.buffer
            .usage()
            .intersects(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE)
    }
}

/// Live blocks by id: core's shared table with [`Block`] payloads.
pub(crate) type BlockTable = tensormem_contract::BlockTable<Block>;

impl Block {
    /// The state of a fresh, unmapped, never used block.
    pub(crate) fn new(buffer: wgpu::Buffer, kind: MemoryKind, size: u64) -> Self {
        Block {
            buffer,
            kind,
            size,
            map: MapState::Unmapped,
            last_use: 0,
            pending: None,
        }
    }
}
