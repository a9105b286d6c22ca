//! `KvLedger`: the device-free bookkeeping of a paged KV cache — which blocks each sequence's
//! table names, how many sequences share each block, which full blocks the prefix cache can hand
//! out again, and which are free.
//!
//! Design (vLLM's block manager, with SGLang-style reuse of released prefixes):
//! * Blocks are indices `0..capacity`. A block is *free* (on a stack), *held* (reference count
//!   ≥ 1: named by that many sequence tables) or *cached and idle* (count 0, still in the
//!   [`PrefixCache`](super::prefix) and its LRU). Every block is exactly one of the three.
//! * A sequence's table has `ceil(len / block_tokens)` blocks. An append writes the next slot of
//!   the tail block; a fork copies the table and increments each count; the first write into a
//!   block another sequence also holds copies it first (copy-on-write), reported as a
//!   [`BlockCopy`] the storage performs before writing.
//! * A block that fills is keyed and cached; a later sequence whose prompt begins with the same
//!   tokens (and salt) takes it instead of a new block. A cached block whose contents would change
//!   (a truncation cut into it) is forgotten first.
//! * When a block is needed and none is free, the oldest idle cached block is evicted. When none
//!   is either, the call fails with [`KvError::OutOfBlocks`] and changes nothing: the caller
//!   preempts a sequence ([`KvLedger::preempt`]: its blocks are released after the storage copied
//!   them out, or dropped to be recomputed) and retries.
//!
//! Costs: append O(1) (plus one key of `block_tokens` tokens when a block fills), fork
//! O(blocks), free and truncate O(blocks released), a prefix lookup one hash and one map probe
//! per block. Memory: per block 4 counters and the cache's key, parent and tokens.

mod preemption;
mod sequences;

pub use preemption::Resumed;
pub use sequences::Admission;
#[cfg(test)]
mod tests;

use super::KvError;
use super::prefix::PrefixCache;

/// A sequence of a [`KvLedger`]: an index and a generation, so a freed id is an error, never
/// another sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId {
    index: u32,
    generation: u32,
}

impl SeqId {
    /// The id's slot (stable while the sequence lives).
    pub fn index(self) -> u32 {
        self.index
    }
}

/// Where a sequence's keys and values are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SeqState {
    /// In device blocks.
    Resident,
    /// Copied to host memory; its blocks were released.
    Swapped,
    /// Released; its tokens are kept so the keys and values can be recomputed.
    #[default]
    Dropped,
}

/// How a preempted sequence gives up its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// Copy its blocks to host memory and back on resume (bit-identical).
    Swap,
    /// Drop them; resume re-admits its tokens (prefix-cache hits included) for recomputation.
    Recompute,
}

/// The slot one token's keys and values go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Block index.
    pub block: u32,
    /// Token position within the block.
    pub offset: u32,
}

/// A copy the storage must perform before the next write: the first `tokens` token slots of
/// block `src` to block `dst` (copy-on-write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    /// The shared block.
    pub src: u32,
    /// The sequence's new private block.
    pub dst: u32,
    /// Token slots that hold data.
    pub tokens: u32,
}

/// Counters of a [`KvLedger`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStats {
    /// Blocks in the cache.
    pub capacity_blocks: usize,
    /// Blocks on the free stack.
    pub free_blocks: usize,
    /// Blocks held by at least one sequence.
    pub used_blocks: usize,
    /// Cached blocks no sequence holds (evictable).
    pub cached_blocks: usize,
    /// Token slots written in held blocks (each physical slot once, however many share it).
    pub stored_tokens: u64,
    /// Tokens of resident sequences (shared prefixes counted per sequence).
    pub sequence_tokens: u64,
    /// Live sequences (resident or preempted).
    pub sequences: usize,
    /// Full prompt blocks found in the prefix cache.
    pub prefix_hits: u64,
    /// Full prompt blocks looked up and not found.
    pub prefix_misses: u64,
    /// Cached blocks evicted to serve a new block.
    pub evictions: u64,
    /// Copy-on-write block copies.
    pub cow_copies: u64,
    /// Sequences swapped out.
    pub swap_outs: u64,
    /// Sequences swapped back in.
    pub swap_ins: u64,
    /// Blocks copied out or in by swaps.
    pub swapped_blocks: u64,
    /// Sequences dropped for recomputation.
    pub recomputes: u64,
}

impl KvStats {
    /// Held token slots that hold tokens (1.0 with no held block).
    pub fn utilization(&self, block_tokens: u32) -> f64 {
        let slots = self.used_blocks as u64 * u64::from(block_tokens);
        if slots == 0 {
            1.0
        } else {
            self.stored_tokens as f64 / slots as f64
        }
    }

    /// Prefix hits over lookups (0 with none).
    pub fn prefix_hit_rate(&self) -> f64 {
        let n = self.prefix_hits + self.prefix_misses;
        if n == 0 {
            0.0
        } else {
            self.prefix_hits as f64 / n as f64
        }
    }
}

/// One sequence's table and tokens.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seq {
    pub(crate) state: SeqState,
    pub(crate) root: u64,
    pub(crate) blocks: Vec<u32>,
    pub(crate) tokens: Vec<u32>,
    /// Keys of the full blocks, in order (the next block's parent).
    pub(crate) keys: Vec<u64>,
}

struct SeqSlot {
    generation: u32,
    seq: Option<Seq>,
}

/// The bookkeeping of a paged KV cache. See the module doc.
pub struct KvLedger {
    block_tokens: u32,
    max_seq: usize,
    refs: Vec<u32>,
    filled: Vec<u32>,
    free: Vec<u32>,
    prefix: PrefixCache,
    slots: Vec<SeqSlot>,
    vacant: Vec<u32>,
    copies: Vec<BlockCopy>,
    /// Freed sequences, emptied, whose vectors the next fork reuses.
    spare: Vec<Seq>,
    stats: KvStats,
}

impl KvLedger {
    /// A ledger of `capacity` blocks of `block_tokens` tokens, for sequences of at most `max_seq`
    /// tokens.
    ///
    /// # Errors
    /// [`KvError::Geometry`] for a zero block size or maximum length, or more than `u32::MAX - 1`
    /// blocks.
    pub fn new(block_tokens: u32, max_seq: usize, capacity: usize) -> Result<Self, KvError> {
        if block_tokens == 0 || max_seq == 0 {
            return Err(KvError::Geometry(format!(
                "block of {block_tokens} tokens, maximum sequence {max_seq}: both must be positive"
            )));
        }
        let mut ledger = KvLedger {
            block_tokens,
            max_seq,
            refs: Vec::new(),
            filled: Vec::new(),
            free: Vec::new(),
            prefix: PrefixCache::new(block_tokens as usize),
            slots: Vec::new(),
            vacant: Vec::new(),
            copies: Vec::new(),
            spare: Vec::new(),
            stats: KvStats::default(),
        };
        ledger.grow(capacity)?;
        Ok(ledger)
    }

    /// Adds `blocks` free blocks (the storage grew).
    ///
    /// # Errors
    /// [`KvError::Geometry`] past `u32::MAX - 1` blocks; nothing changes.
    pub fn grow(&mut self, blocks: usize) -> Result<(), KvError> {
        let old = self.refs.len();
        let new = old
            .checked_add(blocks)
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| KvError::Geometry(format!("{old} + {blocks} blocks is too many")))?;
        self.refs.resize(new, 0);
        self.filled.resize(new, 0);
        self.prefix.grow(new);
        // New blocks go under the free ones, lowest on top: blocks are reused before new ones
        // are touched, and handed out in address order.
        self.free.splice(0..0, (old as u32..new as u32).rev());
        self.stats.capacity_blocks = new;
        Ok(())
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> u32 {
        self.block_tokens
    }

    /// Longest sequence accepted.
    pub fn max_seq(&self) -> usize {
        self.max_seq
    }

    /// Blocks in the ledger.
    pub fn capacity(&self) -> usize {
        self.refs.len()
    }

    /// Blocks a new block can come from now: free, or cached and idle (evictable).
    pub fn available(&self) -> usize {
        self.free.len() + self.prefix.lru_len()
    }

    /// Blocks on the free stack (cached idle blocks excluded).
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// The counters, with the block counts as they are now.
    pub fn stats(&self) -> KvStats {
        let mut s = self.stats.clone();
        s.free_blocks = self.free.len();
        s.cached_blocks = self.prefix.lru_len();
        s.used_blocks = self.refs.len() - self.free.len() - self.prefix.lru_len();
        s
    }

    /// Takes the copy-on-write copies issued since the last call, in order.
    pub fn take_copies(&mut self) -> Vec<BlockCopy> {
        std::mem::take(&mut self.copies)
    }

    /// Reference count of block `b` (0 for a free or idle cached block).
    pub fn refs(&self, b: u32) -> u32 {
        self.refs.get(b as usize).copied().unwrap_or(0)
    }

    /// Whether block `b` is in the prefix cache.
    pub fn is_cached(&self, b: u32) -> bool {
        (b as usize) < self.refs.len() && self.prefix.is_cached(b)
    }

    /// A new block for a holder: free, else the oldest idle cached block. The caller checked
    /// [`KvLedger::available`].
    fn take_block(&mut self) -> Result<u32, KvError> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let b = self.prefix.evict_oldest().ok_or(KvError::OutOfBlocks {
                    needed: 1,
                    available: 0,
                    capacity: self.refs.len(),
                })?;
                self.stats.evictions += 1;
                b
            }
        };
        self.refs[b as usize] = 1;
        self.filled[b as usize] = 0;
        Ok(b)
    }

    /// One more holder of `b`, which may be idle in the cache.
    fn hold(&mut self, b: u32) {
        let i = b as usize;
        if self.refs[i] == 0 {
            self.prefix.remove_lru(b);
            self.stats.stored_tokens += u64::from(self.filled[i]);
        }
        self.refs[i] += 1;
    }

    /// One holder fewer: at zero the block becomes idle in the cache, or free.
    fn release(&mut self, b: u32) {
        let i = b as usize;
        self.refs[i] -= 1;
        if self.refs[i] == 0 {
            self.stats.stored_tokens -= u64::from(self.filled[i]);
            if self.prefix.is_cached(b) {
                self.prefix.push_lru(b);
            } else {
                self.free.push(b);
            }
        }
    }

    /// Sets block `b`'s written slots (held blocks only).
    fn set_filled(&mut self, b: u32, tokens: u32) {
        let i = b as usize;
        self.stats.stored_tokens =
            self.stats.stored_tokens - u64::from(self.filled[i]) + u64::from(tokens);
        self.filled[i] = tokens;
    }

    fn error_out_of_blocks(&self, needed: usize) -> KvError {
        KvError::OutOfBlocks {
            needed,
            available: self.available(),
            capacity: self.refs.len(),
        }
    }
}
