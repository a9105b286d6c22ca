//! The small inputs of one decoder step, built on the host from the chunks and the KV cache's
//! block tables, then uploaded as `U32` tensors: token ids, positions, attention metadata
//! (`[row, length]` per token), the block tables, the rows whose logits are wanted, and one slot
//! list per KV segment the step writes into (`u32::MAX` where the token's block is in another
//! segment). Building them is pure; [`StepInputs::uploads`] lists the uploads in one fixed order
//! so the blocking and the awaitable upload paths (native, browser) are the same three lines.

use tensormem::kv::{KvCache, SeqId};
use tensormem::{ArgumentError, Result};

/// Tokens of one sequence computed in a step.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// The sequence (its blocks already hold slots for every token of the chunk).
    pub seq: SeqId,
    /// Position of the chunk's first token.
    pub start: usize,
    /// The tokens.
    pub tokens: Vec<u32>,
    /// Whether the logits of the chunk's last token are wanted.
    pub logits: bool,
}

/// The host-side inputs of a step (module doc).
pub struct StepInputs {
    /// Tokens in the step.
    pub n: usize,
    /// Chunks (rows of the block tables).
    pub rows: usize,
    ids: Vec<u32>,
    positions: Vec<u32>,
    meta: Vec<u32>,
    tables: Vec<u32>,
    /// `[rows, width]` of the block tables.
    pub table_shape: [usize; 2],
    logit_rows: Vec<u32>,
    /// Per KV segment, the local slot of each token, or `None` for a segment the step's
    /// sequences do not reach.
    slots: Vec<Option<Vec<u32>>>,
}

/// Where a step's uploaded inputs are, as indices into the list of uploaded tensors.
pub struct InputIndices {
    /// Token ids `[n]`.
    pub ids: usize,
    /// Positions `[n]`.
    pub positions: usize,
    /// Attention metadata `[n, 2]`.
    pub meta: usize,
    /// Block tables `[rows, width]`.
    pub tables: usize,
    /// Rows whose logits are wanted `[r]`, when any are.
    pub logit_rows: Option<usize>,
    /// Slots per segment, `None` for a segment not reached.
    pub slots: Vec<Option<usize>>,
}

impl StepInputs {
    /// The inputs of `chunks` over `cache`.
    ///
    /// # Errors
    /// An empty step; a sequence that is not resident; a position without a block.
    pub fn new(cache: &KvCache, chunks: &[Chunk]) -> Result<Self> {
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut meta = Vec::new();
        let mut seqs: Vec<SeqId> = Vec::new();
        let mut logit_rows = Vec::new();
        for (row, c) in chunks.iter().enumerate() {
            seqs.push(c.seq);
            for (i, &t) in c.tokens.iter().enumerate() {
                ids.push(t);
                positions.push((c.start + i) as u32);
                meta.extend([row as u32, (c.start + i + 1) as u32]);
            }
            if c.logits && !c.tokens.is_empty() {
                logit_rows.push((ids.len() - 1) as u32);
            }
        }
        let n = ids.len();
        if n == 0 {
            return Err(ArgumentError::zero("forward: tokens in the step").into());
        }
        let (per_segment, _) = cache.segment_shape();
        let bt = cache.geometry().block_tokens as usize;
        let segments = cache.segments().len();
        let mut slots = vec![vec![u32::MAX; n]; segments];
        let mut reached = vec![false; segments];
        let mut t = 0;
        for c in chunks {
            let table = cache.table(c.seq)?;
            for &b in table {
                if let Some(r) = reached.get_mut(b as usize / per_segment) {
                    *r = true;
                }
            }
            for i in 0..c.tokens.len() {
                let pos = c.start + i;
                let block = *table.get(pos / bt).ok_or_else(|| {
                    let what = format!("forward: block table index of position {pos}");
                    ArgumentError::out_of_range(what, (pos / bt) as u64, table.len() as u64)
                })? as usize;
                let local = ((block % per_segment) * bt + pos % bt) as u32;
                let slot = slots.get_mut(block / per_segment).ok_or_else(|| {
                    let what = format!("forward: KV segment of block {block}");
                    ArgumentError::out_of_range(what, (block / per_segment) as u64, segments as u64)
                })?;
                slot[t] = local;
                t += 1;
            }
        }
        let (tables, table_shape) = cache.block_table_rows(&seqs)?;
        let slots = slots
            .into_iter()
            .zip(reached)
            .map(|(s, r)| r.then_some(s))
            .collect();
        Ok(StepInputs {
            n,
            rows: chunks.len(),
            ids,
            positions,
            meta,
            tables,
            table_shape,
            logit_rows,
            slots,
        })
    }

    /// Rows whose logits the step computes.
    pub fn logit_rows(&self) -> usize {
        self.logit_rows.len()
    }

    /// The segments the step reaches, in order.
    pub fn reached(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect()
    }

    /// Every upload of the step, `(data, shape, label)`, in the order [`StepInputs::indices`]
    /// expects.
    pub fn uploads(&self) -> Vec<(&[u32], Vec<usize>, &'static str)> {
        let n = self.n;
        let mut out: Vec<(&[u32], Vec<usize>, &'static str)> = vec![
            (&self.ids, vec![n], "token ids"),
            (&self.positions, vec![n], "positions"),
            (&self.meta, vec![n, 2], "attention meta"),
            (&self.tables, self.table_shape.to_vec(), "kv block tables"),
        ];
        if !self.logit_rows.is_empty() {
            out.push((&self.logit_rows, vec![self.logit_rows.len()], "logit rows"));
        }
        for s in self.slots.iter().flatten() {
            out.push((s, vec![n], "kv slots"));
        }
        out
    }

    /// Where each input is once `uploads()` went, in order, to indices `first..`.
    pub fn indices(&self, first: usize) -> InputIndices {
        let mut next = first + 4;
        let logit_rows = (!self.logit_rows.is_empty()).then(|| {
            next += 1;
            next - 1
        });
        let slots = self
            .slots
            .iter()
            .map(|s| {
                s.as_ref().map(|_| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        InputIndices {
            ids: first,
            positions: first + 1,
            meta: first + 2,
            tables: first + 3,
            logit_rows,
            slots,
        }
    }
}
