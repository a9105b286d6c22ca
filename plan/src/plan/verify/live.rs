//! The verifier's set of live buffers, ordered by offset: sorted blocks of at most
//! `2 * BLOCK` entries under a sorted array of each block's first offset.
//!
//! The verifier needs three operations per endpoint (the live buffer starting last below an end,
//! insert, remove) on a set of a few thousand buffers, two million times at a million buffers.
//! A `BTreeMap` spends most of its time walking nodes and allocating them as they split and merge
//! (`docs/decisions/verifier-live-set.md`); two binary searches and a short move within one block
//! cost a fraction of that, and blocks are allocated only as the set grows. A set of `m` buffers moves `O(m / BLOCK)` block
//! headers when a block splits or empties (every `BLOCK` operations at most).

/// Entries per block, half the most a block holds before it splits.
const BLOCK: usize = 64;

/// One live buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub offset: u64,
    pub end: u64,
    pub id: u32,
}

/// Live buffers by offset (offsets are distinct among live buffers of a valid plan; the caller
/// checks for an overlap before inserting).
#[derive(Debug, Default)]
pub(crate) struct LiveSet {
    blocks: Vec<Vec<Entry>>,
    /// `firsts[k]`: the offset of `blocks[k][0]` (blocks are never empty).
    firsts: Vec<u64>,
}

impl LiveSet {
    /// The block that holds, or would hold, `offset`: the last whose first offset is at most it.
    fn block_of(&self, offset: u64) -> usize {
        self.firsts
            .partition_point(|&f| f <= offset)
            .saturating_sub(1)
    }

    /// The live buffer with the largest offset below `end`.
    pub fn last_below(&self, end: u64) -> Option<Entry> {
        let k = self.firsts.partition_point(|&f| f < end).checked_sub(1)?;
        let block = &self.blocks[k];
        let j = block.partition_point(|e| e.offset < end);
        Some(block[j - 1])
    }

    pub fn insert(&mut self, entry: Entry) {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::with_capacity(2 * BLOCK));
            self.firsts.push(entry.offset);
        }
        let k = self.block_of(entry.offset);
        let block = &mut self.blocks[k];
        let j = block.partition_point(|e| e.offset < entry.offset);
        block.insert(j, entry);
        self.firsts[k] = block[0].offset;
        if block.len() > 2 * BLOCK {
            let mut upper = Vec::with_capacity(2 * BLOCK);
            upper.extend(block.drain(BLOCK..));
            self.firsts.insert(k + 1, upper[0].offset);
            self.blocks.insert(k + 1, upper);
        }
    }

    /// Removes the buffer at `offset`; returns it.
    pub fn remove(&mut self, offset: u64) -> Option<Entry> {
        let k = self.block_of(offset);
        let block = self.blocks.get_mut(k)?;
        let j = block.partition_point(|e| e.offset < offset);
        if block.get(j).is_none_or(|e| e.offset != offset) {
            return None;
        }
        let entry = block.remove(j);
        if let Some(first) = block.first() {
            self.firsts[k] = first.offset;
        } else {
            self.blocks.remove(k);
            self.firsts.remove(k);
        }
        Some(entry)
    }
}

#[cfg(test)]
mod tests;
