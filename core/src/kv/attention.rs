//! Paged attention on the host: queries of one sequence against the keys and values its block
//! table names, for decode (one query token) and chunked prefill (several, causal).
//!
//! Grouped-query attention: query head `h` reads KV head `h / (q_heads / kv_heads)`. Each query
//! walks the blocks in table order with an online softmax (running maximum and sum, as flash
//! decoding does), so nothing proportional to the sequence is materialised beyond one head's
//! scores of one block. Cost: O(queries × heads × tokens × head_dim).

use super::KvError;
use super::geometry::KvGeometry;

/// One sequence's attention call.
pub struct PagedQuery<'a> {
    /// The layer whose keys and values are read.
    pub layer: u32,
    /// Query heads (a multiple of the geometry's KV heads).
    pub q_heads: u32,
    /// Queries, `[tokens][q_heads][head_dim]`: the sequence's last `tokens` positions.
    pub q: &'a [f32],
    /// The sequence's block table.
    pub table: &'a [u32],
    /// Tokens in the sequence, the queried ones included.
    pub len: usize,
    /// Score scale (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// Computes attention for `query`, reading block `b`'s bytes through `block(b)`. Returns
/// `[tokens][q_heads][head_dim]`.
///
/// # Errors
/// [`KvError::Geometry`] when the query's shape, the table or the head counts disagree with the
/// geometry.
pub fn paged_attention<'b>(
    g: &KvGeometry,
    query: &PagedQuery<'_>,
    block: &dyn Fn(u32) -> &'b [u8],
) -> Result<Vec<f32>, KvError> {
    let d = g.head_dim as usize;
    let hq = query.q_heads as usize;
    let bt = g.block_tokens as usize;
    if hq == 0 || !hq.is_multiple_of(g.kv_heads as usize) || !query.q.len().is_multiple_of(hq * d) {
        return Err(KvError::Geometry(format!(
            "{} query elements, {hq} query heads: not a whole number of tokens of {} KV heads × {d}",
            query.q.len(),
            g.kv_heads
        )));
    }
    let n = query.q.len() / (hq * d);
    if n > query.len || query.table.len() < query.len.div_ceil(bt) || query.layer >= g.layers {
        return Err(KvError::Geometry(format!(
            "{n} queries over {} tokens with {} blocks in layer {}",
            query.len,
            query.table.len(),
            query.layer
        )));
    }
    let group = hq / g.kv_heads as usize;
    let mut out = vec![0f32; n * hq * d];
    let (mut k, mut v) = (vec![0f32; d], vec![0f32; d]);
    for t in 0..n {
        let visible = query.len - n + t + 1;
        for h in 0..hq {
            let q = &query.q[(t * hq + h) * d..(t * hq + h + 1) * d];
            let kvh = (h / group) as u32;
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
            let acc = &mut out[(t * hq + h) * d..(t * hq + h + 1) * d];
            for pos in 0..visible {
                let bytes = block(query.table[pos / bt]);
                let off = (pos % bt) as u32;
                g.layout()
                    .read_head(bytes, query.layer, 0, kvh, off, &mut k);
                let s = q.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>() * query.scale;
                let new_max = max.max(s);
                let correction = (max - new_max).exp();
                let p = (s - new_max).exp();
                g.layout()
                    .read_head(bytes, query.layer, 1, kvh, off, &mut v);
                for (a, &x) in acc.iter_mut().zip(&v) {
                    *a = *a * correction + p * x;
                }
                sum = sum * correction + p;
                max = new_max;
            }
            for a in acc.iter_mut() {
                *a /= sum;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
