//! One forward step of the decoder over a batch of chunks — prompt pieces of any length and
//! single decode tokens of different sequences, mixed — reading and writing the paged KV cache.
//!
//! The step runs the standard ops eagerly on the runtime ([`Runtime::dispatch`]); each
//! intermediate is allocated from the runtime's pool when it is produced and freed after its last
//! use, so a pool with record-and-replay ([`tensormem::pool::ReplayPool`]) serves repeated step
//! shapes from one planned arena. Per layer: RMSNorm, the Q/K/V projections, rotary embeddings,
//! [`Op::KvWrite`] of the chunk's keys and values into each KV segment, [`Op::PagedAttention`]
//! over the segments the step's block tables reach (the softmax state carried from one to the
//! next), the output projection, the residual, and the SwiGLU MLP. Only the rows whose logits are
//! asked for (a chunk's last token) go through the final norm and the vocabulary projection.

use std::sync::Arc;

use tensormem::kv::KvCache;
use tensormem::pool::ReplayPool;
use tensormem::{DType, Op, Result, Runtime, Tensor, WeightFormat};

use super::config::LlamaConfig;
pub use super::step_inputs::Chunk;
use super::step_inputs::{InputIndices, StepInputs};
use super::weights::LlamaWeights;

/// The decoder: config and device weights on a runtime.
pub struct Decoder {
    /// The runtime everything runs on.
    pub rt: Runtime,
    /// The checkpoint's config.
    pub cfg: LlamaConfig,
    /// Device weights.
    pub weights: LlamaWeights,
    /// The runtime's record-and-replay pool, when it has one: each step is bracketed as one
    /// replay step keyed by its bucketed shape, so repeated shapes take their intermediates'
    /// offsets from a plan.
    pub replay: Option<Arc<ReplayPool>>,
}

/// The replay key of a step: its token count rounded up to a power of two (the bucket), the
/// KV segments it reaches and the rows whose logits it computes (each changes the step's
/// sequence of allocations).
fn step_key(tokens: usize, segments: usize, logit_rows: usize) -> u64 {
    let bucket = tokens.next_power_of_two() as u64;
    (bucket << 32)
        | ((segments as u64 & 0xffff) << 16)
        | (logit_rows.next_power_of_two() as u64 & 0xffff)
}

/// Tensors of one step, freed together when the step ends (on success or error).
struct Scratch<'a> {
    rt: &'a Runtime,
    held: Vec<Tensor>,
}

impl<'a> Scratch<'a> {
    fn new(rt: &'a Runtime) -> Self {
        Scratch {
            rt,
            held: Vec::new(),
        }
    }

    fn keep(&mut self, t: Tensor) -> usize {
        self.held.push(t);
        self.held.len() - 1
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        for t in self.held.drain(..) {
            let _ = self.rt.free(t);
        }
    }
}

impl Decoder {
    /// Runs `chunks` through the model, writing their keys and values into `cache`, and returns
    /// the logits (`vocab_size` each) of the chunks that ask for them, in chunk order.
    ///
    /// # Errors
    /// An empty step, a sequence that is not resident, a cache of another geometry, device
    /// errors. The step's intermediates are freed on every path.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward(&self, cache: &KvCache, chunks: &[Chunk]) -> Result<Vec<Vec<f32>>> {
        let inputs = StepInputs::new(cache, chunks)?;
        self.begin(cache, &inputs)?;
        let out = (|| {
            let mut s = Scratch::new(&self.rt);
            for (data, shape, label) in inputs.uploads() {
                s.keep(self.rt.tensor_from(DType::U32, &shape, data, label)?);
            }
            match self.run(&mut s, cache, &inputs, &inputs.indices(0))? {
                Some(logits) => Ok(self.rows(self.rt.download(&s.held[logits])?)),
                None => Ok(Vec::new()),
            }
        })();
        self.end(out)
    }

    /// [`Decoder::forward`] without blocking (every target; the browser's form).
    ///
    /// # Errors
    /// As [`Decoder::forward`].
    pub async fn forward_async(&self, cache: &KvCache, chunks: &[Chunk]) -> Result<Vec<Vec<f32>>> {
        let inputs = StepInputs::new(cache, chunks)?;
        self.begin(cache, &inputs)?;
        let out = async {
            let mut s = Scratch::new(&self.rt);
            for (data, shape, label) in inputs.uploads() {
                s.keep(
                    self.rt
                        .tensor_from_async(DType::U32, &shape, data, label)
                        .await?,
                );
            }
            match self.run(&mut s, cache, &inputs, &inputs.indices(0))? {
                Some(logits) => Ok(self.rows(self.rt.download_async(&s.held[logits]).await?)),
                None => Ok(Vec::new()),
            }
        }
        .await;
        self.end(out)
    }

    /// Opens the step's replay bracket, keyed by its shape, where the runtime replays.
    fn begin(&self, cache: &KvCache, inputs: &StepInputs) -> Result<()> {
        match &self.replay {
            Some(r) => r.begin_step_keyed(step_key(
                inputs.n,
                cache.segments().len(),
                inputs.logit_rows(),
            )),
            None => Ok(()),
        }
    }

    /// Closes the replay bracket once every intermediate of the step is freed.
    fn end<T>(&self, out: Result<T>) -> Result<T> {
        let ended = self.replay.as_ref().map_or(Ok(()), |r| r.end_step());
        let out = out?;
        ended?;
        Ok(out)
    }

    /// One row of logits per `vocab_size` values.
    fn rows(&self, flat: Vec<f32>) -> Vec<Vec<f32>> {
        flat.chunks(self.cfg.vocab_size)
            .map(<[f32]>::to_vec)
            .collect()
    }

    /// The step's ops (module doc) over its uploaded inputs; the index in `s` of the logits
    /// `[rows, vocab]`, or `None` when no row asks for them.
    fn run(
        &self,
        s: &mut Scratch<'_>,
        cache: &KvCache,
        inp: &StepInputs,
        ix: &InputIndices,
    ) -> Result<Option<usize>> {
        let cfg = &self.cfg;
        let h = cfg.hidden_size;
        let g = *cache.geometry();
        if (g.layers as usize, g.kv_heads as usize, g.head_dim as usize)
            != (cfg.num_hidden_layers, cfg.kv_heads(), cfg.head_dim())
        {
            return Err(tensormem::ArgumentError::invalid_value(
                "KV cache geometry",
                format!("{g:?}"),
                format!(
                    "the model's {} layers, {} KV heads and head dim {}",
                    cfg.num_hidden_layers,
                    cfg.kv_heads(),
                    cfg.head_dim()
                ),
            )
            .into());
        }
        let n = inp.n;
        let (per_segment, stride) = cache.segment_shape();
        let used = inp.reached();
        let view = StepView {
            n,
            rows: inp.rows,
            segments: cache.segments(),
            per_segment,
            stride,
            kv: g.layout(),
            used: &used,
            slots: ix.slots.iter().map(|i| i.map(|i| &s.held[i])).collect(),
            positions: &s.held[ix.positions],
            meta: &s.held[ix.meta],
            tables: &s.held[ix.tables],
            width: inp.table_shape[1],
        };
        let e = &self.weights.embed;
        let embed = Op::Embedding {
            vocab: cfg.vocab_size as u32,
            dim: h as u32,
            rows: n as u32,
            weight_format: e.format,
        };
        let mut inputs = vec![&e.w];
        inputs.extend(e.scales.as_ref());
        inputs.push(&s.held[ix.ids]);
        let mut x = self.op(&embed, &inputs, &[n, h], "embeddings")?;
        for (li, layer) in self.weights.layers.iter().enumerate() {
            x = self.layer(li, layer, x, &view)?;
        }
        let (r, Some(rows_t)) = (inp.logit_rows(), ix.logit_rows) else {
            x.free()?;
            return Ok(None);
        };
        let gather = Op::Embedding {
            vocab: n as u32,
            dim: h as u32,
            rows: r as u32,
            weight_format: WeightFormat::F32,
        };
        let last = self.op(&gather, &[&x, &s.held[rows_t]], &[r, h], "last rows")?;
        x.free()?;
        let xn = self.rms_norm(&last, &self.weights.norm, r)?;
        last.free()?;
        let head = self.weights.lm_head.as_ref().unwrap_or(&self.weights.embed);
        let logits = self.linear(&xn, head, r, "logits")?;
        xn.free()?;
        Ok(Some(s.keep(logits.into_inner())))
    }
}

/// What every layer of a step reads: the step's shape, its KV segments and its uploaded inputs.
pub struct StepView<'s> {
    /// Tokens in the step.
    pub n: usize,
    /// Chunks (block table rows).
    pub rows: usize,
    /// The KV cache's segments, blocks per segment and block stride.
    pub segments: &'s [Tensor],
    /// Blocks per segment.
    pub per_segment: usize,
    /// Bytes between blocks.
    pub stride: u64,
    /// The cache's block layout.
    pub kv: tensormem::ops::KvLayout,
    /// The segments the step reaches, in order.
    pub used: &'s [usize],
    /// Per segment, the token slots (`None` where not reached).
    pub slots: Vec<Option<&'s Tensor>>,
    /// Positions, attention metadata and block tables.
    pub positions: &'s Tensor,
    /// `[row, length]` per token.
    pub meta: &'s Tensor,
    /// Block tables `[rows, width]`.
    pub tables: &'s Tensor,
    /// Width of the block tables.
    pub width: usize,
}
