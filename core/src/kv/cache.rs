//! `KvCache`: a paged KV cache in a runtime's device memory — a [`KvLedger`] over blocks held in
//! segment tensors taken from the runtime's pools, so every block counts in the runtime's memory
//! account and budget.
//!
//! * **Storage.** Blocks live in segments, each one device tensor of up to `segment_blocks`
//!   blocks at a fixed stride (the block's bytes rounded up to the binding alignment). A segment
//!   is at most the device's largest block, so a cache larger than one buffer (WebGPU's 256 MiB)
//!   spans several. When the ledger runs out of free blocks the cache grows, up to its budget:
//!   in place where the device pool offers expandable tensors (host, CUDA, sparse Vulkan: one
//!   segment reserved for the budget and committed as blocks are used), else a segment at a
//!   time (`storage`). Global block `b` is block `b % segment_blocks` of segment
//!   `b / segment_blocks`.
//! * **Pressure.** An append that finds no block free grows the storage; past the budget the
//!   ledger evicts idle cached prefixes; when none is left, the most recently admitted other
//!   resident sequence is preempted as [`KvCacheConfig::preemption`] says: swapped (its blocks
//!   copied to the cache's readback pool on the backend's transfer lane, one copy per run of
//!   adjacent blocks, and restored bit-identical on [`KvCache::resume`]; `swap`) or dropped for
//!   recomputation. Preempted sequences are reported by [`KvCache::take_preempted`].
//! * **Copy-on-write** copies run on the device (one copy per block) before the write that
//!   needed them.
//! * **Kernels** read a batch's block tables as one `U32` tensor ([`KvCache::block_tables`]).
//!   The host path (`host_path`: `write_token`, `attention`; native only) reads and writes whole
//!   blocks through transfers: the reference the device kernels are checked against, not a fast
//!   path.
//! * **wasm32** has everything but swapping and the host path, whose reads block: there the
//!   cache preempts by recomputation and kernels reach the blocks
//!   ([`KvCache::block_tables_async`]).

#[cfg(not(target_arch = "wasm32"))]
mod host_path;
mod lane;
mod storage;
#[cfg(not(target_arch = "wasm32"))]
mod swap;
#[cfg(test)]
mod tests;

#[cfg(not(target_arch = "wasm32"))]
use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
use std::sync::Arc;

use super::{Admission, KvError, KvGeometry, KvLedger, KvStats, Preemption, SeqId, SeqState, Slot};
#[cfg(not(target_arch = "wasm32"))]
use crate::pool::DevicePool;
use crate::runtime::{Runtime, Tensor};
use crate::{DType, Result};

use storage::Segments;

/// How a [`KvCache`] is built.
#[derive(Clone, Copy, Debug)]
pub struct KvCacheConfig {
    /// Shape and block layout.
    pub geometry: KvGeometry,
    /// Most bytes of blocks the cache holds on the device.
    pub budget: u64,
    /// How a sequence is preempted when memory runs out.
    pub preemption: Preemption,
}

/// Counters of a [`KvCache`]: the ledger's, and the storage's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvCacheStats {
    /// Blocks, sequences, prefix hits, evictions, copies, swaps.
    pub ledger: KvStats,
    /// Segment tensors held.
    pub segments: usize,
    /// Device bytes held by the segments.
    pub device_bytes: u64,
    /// Host bytes held by swapped sequences.
    pub host_bytes: u64,
    /// Stored tokens ÷ token slots of held blocks.
    pub utilization: f64,
}

/// A paged KV cache on a runtime's device. See the module doc.
pub struct KvCache {
    rt: Runtime,
    config: KvCacheConfig,
    ledger: KvLedger,
    segments: Segments,
    /// Resident sequences in admission order (the last is preempted first).
    order: Vec<SeqId>,
    /// Swapped sequences' slots in host memory (`swap`).
    #[cfg(not(target_arch = "wasm32"))]
    host: HashMap<SeqId, swap::Swapped>,
    /// The readback pool swaps go to, made on the first swap.
    #[cfg(not(target_arch = "wasm32"))]
    swap_pool: Option<Arc<dyn DevicePool>>,
    preempted: Vec<SeqId>,
    /// The blocks' state last recorded in the trace (`lane`).
    lane: Option<[u64; 5]>,
}

impl KvCache {
    /// A cache on `rt`. Allocates nothing until the first sequence.
    ///
    /// # Errors
    /// [`KvError::BudgetBelowBlock`]; [`KvError::Geometry`] for a block larger than the device's
    /// largest block.
    pub fn new(rt: &Runtime, config: KvCacheConfig) -> Result<Self> {
        if cfg!(target_arch = "wasm32") && config.preemption == Preemption::Swap {
            return Err(crate::Error::Unsupported {
                backend: crate::Backend::capabilities(rt.front()).backend,
                what: "KV swap preemption on wasm32 (its copies to host memory block; \
                       preempt by recomputation)"
                    .into(),
            });
        }
        let segments = Segments::plan(rt, &config.geometry, config.budget)?;
        let ledger = KvLedger::new(
            config.geometry.block_tokens,
            config.geometry.max_seq as usize,
            0,
        )?;
        Ok(KvCache {
            rt: rt.clone(),
            config,
            ledger,
            segments,
            order: Vec::new(),
            #[cfg(not(target_arch = "wasm32"))]
            host: HashMap::new(),
            #[cfg(not(target_arch = "wasm32"))]
            swap_pool: None,
            preempted: Vec::new(),
            lane: None,
        })
    }

    /// The geometry.
    pub fn geometry(&self) -> &KvGeometry {
        &self.config.geometry
    }

    /// Admits a sequence holding `tokens`; see [`KvLedger::admit`]. Grows the storage when the
    /// blocks do not fit, and preempts other sequences past the budget.
    ///
    /// # Errors
    /// [`KvError::TooLong`]; [`KvError::OutOfBlocks`] when even preempting every other sequence
    /// would not make room; device errors while growing or swapping.
    pub fn admit(&mut self, tokens: &[u32], salt: u64) -> Result<Admission> {
        let need = tokens
            .len()
            .div_ceil(self.config.geometry.block_tokens as usize);
        loop {
            self.make_room(need)?;
            match self.ledger.admit(tokens, salt) {
                Ok(a) => {
                    self.order.push(a.seq);
                    self.record_lane();
                    return Ok(a);
                }
                Err(KvError::OutOfBlocks { .. }) if self.preempt_one(None)? => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Appends one token to `seq` and returns its slot (copy-on-write performed first).
    ///
    /// # Errors
    /// As [`KvLedger::append`]; [`KvError::OutOfBlocks`] when no other sequence is left to
    /// preempt; device errors.
    pub fn append(&mut self, seq: SeqId, token: u32) -> Result<Slot> {
        loop {
            let need = self.ledger.blocks_for_append(seq)?;
            self.make_room(need)?;
            match self.ledger.append(seq, token) {
                Ok(slot) => {
                    self.run_copies()?;
                    self.record_lane();
                    return Ok(slot);
                }
                Err(KvError::OutOfBlocks { .. }) if self.preempt_one(Some(seq))? => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A copy-on-write fork of `seq`.
    ///
    /// # Errors
    /// As [`KvLedger::fork`].
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId> {
        let child = self.ledger.fork(seq)?;
        self.order.push(child);
        self.record_lane();
        Ok(child)
    }

    /// Shortens `seq` to `len` tokens.
    ///
    /// # Errors
    /// As [`KvLedger::truncate`].
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<()> {
        self.ledger.truncate(seq, len)?;
        self.record_lane();
        Ok(())
    }

    /// Frees `seq` (resident or preempted).
    ///
    /// # Errors
    /// As [`KvLedger::free`].
    pub fn free(&mut self, seq: SeqId) -> Result<()> {
        self.ledger.free(seq)?;
        self.order.retain(|&s| s != seq);
        self.drop_swapped(seq);
        self.record_lane();
        Ok(())
    }

    /// Preempts `seq` as the configuration says (see the module doc).
    ///
    /// # Errors
    /// As [`KvLedger::preempt`]; device errors while copying out (the sequence stays resident).
    pub fn preempt(&mut self, seq: SeqId) -> Result<()> {
        let how = self.config.preemption;
        let table = self.ledger.resident_blocks(seq)?.to_vec();
        if how == Preemption::Swap {
            self.swap_out(seq, &table)?;
        }
        self.ledger.preempt(seq, how)?;
        self.order.retain(|&s| s != seq);
        self.preempted.push(seq);
        self.record_lane();
        Ok(())
    }

    /// Brings a preempted `seq` back: a swapped one bit-identical, a dropped one admitted again
    /// (recompute `tokens[cached_tokens..]`).
    ///
    /// # Errors
    /// As [`KvLedger::resume`]; device errors.
    pub fn resume(&mut self, seq: SeqId) -> Result<Admission> {
        let need = self
            .ledger
            .tokens(seq)?
            .len()
            .div_ceil(self.config.geometry.block_tokens as usize);
        self.make_room(need)?;
        let resumed = self.ledger.resume(seq)?;
        self.swap_in(seq, &resumed)?;
        let admission = resumed.admission;
        self.order.push(seq);
        self.record_lane();
        Ok(admission)
    }

    /// Sequences preempted since the last call, in order.
    pub fn take_preempted(&mut self) -> Vec<SeqId> {
        std::mem::take(&mut self.preempted)
    }

    /// Where `seq`'s keys and values are.
    ///
    /// # Errors
    /// An unknown or freed sequence.
    pub fn state(&self, seq: SeqId) -> Result<SeqState> {
        Ok(self.ledger.state(seq)?)
    }

    /// The block table of `seq` (empty while preempted).
    ///
    /// # Errors
    /// An unknown or freed sequence.
    pub fn table(&self, seq: SeqId) -> Result<&[u32]> {
        Ok(self.ledger.table(seq)?)
    }

    /// The tokens of `seq`.
    ///
    /// # Errors
    /// An unknown or freed sequence.
    pub fn tokens(&self, seq: SeqId) -> Result<&[u32]> {
        Ok(self.ledger.tokens(seq)?)
    }

    /// The block tables of `seqs` as one `U32` tensor `[seqs][max blocks]` of global block
    /// indices, padded with `u32::MAX`: what the paged-attention kernels read. The caller frees it.
    ///
    /// # Errors
    /// A preempted or freed sequence; device errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn block_tables(&self, seqs: &[SeqId]) -> Result<Tensor> {
        let (flat, shape) = self.block_table_rows(seqs)?;
        self.rt
            .tensor_from(DType::U32, &shape, &flat, "kv block tables")
    }

    /// [`KvCache::block_tables`] without blocking (every target).
    ///
    /// # Errors
    /// As [`KvCache::block_tables`].
    pub async fn block_tables_async(&self, seqs: &[SeqId]) -> Result<Tensor> {
        let (flat, shape) = self.block_table_rows(seqs)?;
        self.rt
            .tensor_from_async(DType::U32, &shape, &flat, "kv block tables")
            .await
    }

    /// The block tables of `seqs` on the host, row-major, and their shape `[rows, width]`.
    /// The width is the longest table's length rounded up to a power of two, the entries past a
    /// table's end `u32::MAX` (kernels read only a sequence's own positions): a decoding
    /// sequence's table then keeps its size for ever longer runs of steps, so a step's
    /// allocations repeat and the record-and-replay pool keeps its plan (a table one block
    /// longer every `block_tokens` steps would change the step's sizes each time).
    ///
    /// # Errors
    /// A preempted or freed sequence.
    pub fn block_table_rows(&self, seqs: &[SeqId]) -> Result<(Vec<u32>, [usize; 2])> {
        let mut tables = Vec::with_capacity(seqs.len());
        for &s in seqs {
            tables.push(self.ledger.resident_blocks(s)?);
        }
        let longest = tables.iter().map(|t| t.len()).max().unwrap_or(0).max(1);
        let width = longest.checked_next_power_of_two().unwrap_or(longest);
        let rows = seqs.len().max(1);
        let mut flat = vec![u32::MAX; rows * width];
        for (row, t) in tables.iter().enumerate() {
            flat[row * width..row * width + t.len()].copy_from_slice(t);
        }
        Ok((flat, [rows, width]))
    }

    /// The segment tensors (kernels bind them; block `b` is at `(b % segment_blocks) × stride`
    /// of segment `b / segment_blocks`).
    pub fn segments(&self) -> &[Tensor] {
        self.segments.tensors()
    }

    /// Blocks per segment, and the stride between blocks in bytes.
    pub fn segment_shape(&self) -> (usize, u64) {
        (self.segments.blocks_per_segment(), self.segments.stride())
    }

    /// The counters now.
    pub fn stats(&self) -> KvCacheStats {
        let ledger = self.ledger.stats();
        KvCacheStats {
            utilization: ledger.utilization(self.config.geometry.block_tokens),
            ledger,
            segments: self.segments.tensors().len(),
            device_bytes: self.segments.device_bytes(),
            host_bytes: self.swapped_bytes(),
        }
    }

    /// Frees every segment now, reporting device errors (dropping the cache frees them too,
    /// silently). Sequences are forgotten.
    ///
    /// # Errors
    /// Device errors (every segment is still released).
    pub fn release(mut self) -> Result<()> {
        self.segments.release(&self.rt)
    }

    /// Grows the storage until `need` blocks are free, within the budget: growing comes before
    /// evicting cached prefixes, which later prompts may still hit.
    fn make_room(&mut self, need: usize) -> Result<()> {
        while self.ledger.free_blocks() < need {
            match self.segments.grow(&self.rt)? {
                Some(blocks) => self.ledger.grow(blocks)?,
                None => break,
            }
        }
        Ok(())
    }

    /// Preempts the most recently admitted resident sequence other than `keep`; whether one was.
    fn preempt_one(&mut self, keep: Option<SeqId>) -> Result<bool> {
        let Some(&victim) = self.order.iter().rev().find(|&&s| Some(s) != keep) else {
            return Ok(false);
        };
        self.preempt(victim)?;
        Ok(true)
    }

    /// Swapping needs blocking copies, which wasm32 refuses at [`KvCache::new`].
    #[cfg(target_arch = "wasm32")]
    fn swap_out(&mut self, _seq: SeqId, _table: &[u32]) -> Result<()> {
        Err(crate::Error::invariant(
            "no KV swap on wasm32",
            "KvCache::new refuses swap preemption there",
        ))
    }

    /// Nothing is ever swapped on wasm32 (see `swap_out`).
    #[cfg(target_arch = "wasm32")]
    fn swap_in(&mut self, _seq: SeqId, _resumed: &super::Resumed) -> Result<()> {
        Ok(())
    }

    /// Nothing is ever swapped on wasm32.
    #[cfg(target_arch = "wasm32")]
    fn drop_swapped(&mut self, _seq: SeqId) {}

    /// Host bytes of swapped sequences.
    fn swapped_bytes(&self) -> u64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.host.values().map(swap::Swapped::size).sum();
        #[cfg(target_arch = "wasm32")]
        0
    }

    /// Performs the ledger's pending copy-on-write copies on the device.
    fn run_copies(&mut self) -> Result<()> {
        for c in self.ledger.take_copies() {
            self.segments.copy_block(&self.rt, c.src, c.dst)?;
        }
        Ok(())
    }
}

impl Drop for KvCache {
    fn drop(&mut self) {
        let _ = self.segments.release(&self.rt);
    }
}
