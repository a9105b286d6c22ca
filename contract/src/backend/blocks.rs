//! [`BlockTable`]: the one `BlockId` → native block table every backend and the validating front
//! share.
//!
//! Before contract v2 each backend kept its own map with its own error for an unknown id and its
//! own range check. One generic table gives every backend the same id rule (ids start at 1 and are
//! never reused, so a stale id is reported as unknown instead of naming a newer block), the same
//! typed errors ([`Error::UnknownBlock`], [`Error::OutOfBounds`]) and the same byte accounting.
//! The payload `T` is whatever the backend needs to reach the native object (a `wgpu::Buffer`, a
//! `VkBuffer` and its allocation, a device pointer, host bytes); the front stores `()`.

use std::collections::HashMap;

use crate::backend::{BlockId, BlockRange, MemoryKind};
use crate::{Error, Result};

/// One live block: its kind, its size and the backend's native payload.
#[derive(Debug)]
pub struct BlockEntry<T> {
    /// What the block is for.
    pub kind: MemoryKind,
    /// Usable size in bytes (ranges are checked against it).
    pub size: u64,
    /// The backend's native object.
    pub native: T,
}

/// An entry reads as its native payload (`entry.buffer`, `entry.unmap()`), beside its own `kind`
/// and `size`, so a backend's code names the native fields directly.
impl<T> std::ops::Deref for BlockEntry<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.native
    }
}

impl<T> std::ops::DerefMut for BlockEntry<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.native
    }
}

impl<T> BlockEntry<T> {
    /// Checks that `offset .. offset + size` lies inside the block (overflow is out of bounds).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] naming `what`.
    pub fn check_range(&self, offset: u64, size: u64, what: &'static str) -> Result<()> {
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
}

/// Live blocks by id. Not thread-safe by itself: each owner puts it behind its own lock.
#[derive(Debug)]
pub struct BlockTable<T> {
    /// Backend name, for errors.
    backend: &'static str,
    blocks: HashMap<u64, BlockEntry<T>>,
    /// Last id handed out; ids start at 1 and are never reused.
    last_id: u64,
    /// Sum of the live blocks' sizes, in bytes.
    bytes: u64,
}

impl<T> BlockTable<T> {
    /// An empty table whose errors name `backend`.
    pub fn new(backend: &'static str) -> Self {
        BlockTable {
            backend,
            blocks: HashMap::new(),
            last_id: 0,
            bytes: 0,
        }
    }

    /// Adds a block and names it with a fresh id.
    pub fn insert(&mut self, kind: MemoryKind, size: u64, native: T) -> BlockId {
        self.last_id += 1;
        self.bytes += size;
        self.blocks
            .insert(self.last_id, BlockEntry { kind, size, native });
        BlockId(self.last_id)
    }

    /// Adds a block under an id chosen elsewhere (the front mirrors the backend's ids).
    ///
    /// # Errors
    /// [`Error::InvariantViolated`] when the id is already live.
    pub fn insert_as(&mut self, id: BlockId, kind: MemoryKind, size: u64, native: T) -> Result<()> {
        if self.blocks.contains_key(&id.0) {
            return Err(Error::invariant(
                "block ids are unique among live blocks",
                format!("{}: block {} issued twice", self.backend, id.0),
            ));
        }
        self.last_id = self.last_id.max(id.0);
        self.bytes += size;
        self.blocks.insert(id.0, BlockEntry { kind, size, native });
        Ok(())
    }

    /// The block named `id`.
    ///
    /// # Errors
    /// [`Error::UnknownBlock`] for an id that is not live (never issued, or freed).
    pub fn get(&self, id: BlockId) -> Result<&BlockEntry<T>> {
        self.blocks.get(&id.0).ok_or(Error::UnknownBlock {
            backend: self.backend,
            block: id.0,
        })
    }

    /// The block named `id`, mutably.
    ///
    /// # Errors
    /// As [`BlockTable::get`].
    pub fn get_mut(&mut self, id: BlockId) -> Result<&mut BlockEntry<T>> {
        let backend = self.backend;
        self.blocks.get_mut(&id.0).ok_or(Error::UnknownBlock {
            backend,
            block: id.0,
        })
    }

    /// The block a range addresses, after checking that the range lies inside it.
    ///
    /// # Errors
    /// [`Error::UnknownBlock`], [`Error::OutOfBounds`] naming `what`.
    pub fn range(&self, r: BlockRange, what: &'static str) -> Result<&BlockEntry<T>> {
        let entry = self.get(r.block)?;
        entry.check_range(r.offset, r.size, what)?;
        Ok(entry)
    }

    /// Removes the block named `id` and returns it.
    ///
    /// # Errors
    /// As [`BlockTable::get`].
    pub fn remove(&mut self, id: BlockId) -> Result<BlockEntry<T>> {
        let entry = self.blocks.remove(&id.0).ok_or(Error::UnknownBlock {
            backend: self.backend,
            block: id.0,
        })?;
        self.bytes -= entry.size;
        Ok(entry)
    }

    /// Changes a block's usable size (blocks that grow in place, e.g. CUDA expandable segments).
    ///
    /// # Errors
    /// As [`BlockTable::get`].
    pub fn resize(&mut self, id: BlockId, size: u64) -> Result<()> {
        let entry = self.get_mut(id)?;
        let old = std::mem::replace(&mut entry.size, size);
        self.bytes = self.bytes - old + size;
        Ok(())
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is live.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Bytes in live blocks.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes in live blocks of `kind`.
    pub fn bytes_of(&self, kind: MemoryKind) -> u64 {
        self.blocks
            .values()
            .filter(|b| b.kind == kind)
            .map(|b| b.size)
            .sum()
    }

    /// Every live block with its id, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &BlockEntry<T>)> {
        self.blocks.iter().map(|(id, b)| (BlockId(*id), b))
    }

    /// Removes every live block (teardown, leak reports).
    pub fn drain(&mut self) -> Vec<(BlockId, BlockEntry<T>)> {
        self.bytes = 0;
        self.blocks
            .drain()
            .map(|(id, b)| (BlockId(id), b))
            .collect()
    }
}

#[cfg(test)]
mod tests;
