//! The cache's host path (native only: it reads and writes whole blocks through blocking
//! transfers): one token's keys and values written into its block, and paged attention computed
//! on the host from the blocks read back. The reference the device kernels are checked against,
//! not a fast path.

use super::KvCache;
use crate::Result;
use crate::kv::KvError;
use crate::kv::SeqId;
use crate::kv::attention::{PagedQuery, paged_attention};

impl KvCache {
    /// Writes the keys and values (`[layers][kv_heads][head_dim]` each) of token `pos` of `seq`
    /// (host path: one read and one write of the block).
    ///
    /// # Errors
    /// A position outside the sequence, wrong lengths, device errors.
    pub fn write_token(&mut self, seq: SeqId, pos: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let g = self.config.geometry;
        let per_layer = (g.kv_heads * g.head_dim) as usize;
        if k.len() != per_layer * g.layers as usize || v.len() != k.len() {
            return Err(KvError::Geometry(format!(
                "token keys of {} and values of {} elements; the geometry takes {} each",
                k.len(),
                v.len(),
                per_layer * g.layers as usize
            ))
            .into());
        }
        let slot = self.ledger.slot(seq, pos)?;
        let mut bytes = self.segments.read_blocks(&self.rt, &[slot.block])?;
        for layer in 0..g.layers as usize {
            let (kl, vl) = (
                &k[layer * per_layer..][..per_layer],
                &v[layer * per_layer..][..per_layer],
            );
            g.layout()
                .write_token(&mut bytes, layer as u32, slot.offset, kl, vl);
        }
        self.segments.write_blocks(&self.rt, &[slot.block], &bytes)
    }

    /// Paged attention of `seq`'s last `q.len() / (q_heads × head_dim)` tokens in `layer` (host
    /// path: the sequence's blocks are read, then [`paged_attention`] runs).
    ///
    /// # Errors
    /// As [`paged_attention`]; a preempted sequence; device errors.
    pub fn attention(&self, seq: SeqId, layer: u32, q_heads: u32, q: &[f32]) -> Result<Vec<f32>> {
        let g = self.config.geometry;
        let table = self.ledger.resident_blocks(seq)?;
        let bytes = self.segments.read_blocks(&self.rt, table)?;
        let len = self.ledger.tokens(seq)?.len();
        let local: Vec<u32> = (0..table.len() as u32).collect();
        let block_bytes = g.block_bytes() as usize;
        let query = PagedQuery {
            layer,
            q_heads,
            q,
            table: &local,
            len,
            scale: 1.0 / (g.head_dim as f32).sqrt(),
        };
        Ok(paged_attention(&g, &query, &|b| {
            &bytes[b as usize * block_bytes..][..block_bytes]
        })?)
    }
}
