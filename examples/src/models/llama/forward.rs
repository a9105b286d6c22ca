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

use tensormem::kv::{KvCache, SeqId};
use tensormem::pool::ReplayPool;
use tensormem::{DType, Error, Op, Result, Runtime, Tensor, WeightFormat};

use super::config::LlamaConfig;
use super::step_inputs::{InputIndices, StepInputs};
use super::weights::{Linear, LlamaWeights};

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
    /// Allocates an output of `shape` and runs `op` into it.
    fn op(&self, op: &Op, inputs: &[&Tensor], shape: &[usize], label: &str) -> Result<Tensor> {
        let out = self.rt.alloc(DType::F32, shape, label)?;
        if let Err(e) = self.rt.dispatch(op, inputs, &[&out]) {
            let _ = self.rt.free(out);
            return Err(e);
        }
        Ok(out)
    }

    /// `x · Wᵀ (+ bias)` for `rows` rows of `x`.
    fn linear(&self, x: &Tensor, l: &Linear, rows: usize, label: &str) -> Result<Tensor> {
        let op = Op::MatMul {
            batch: 1,
            m: rows as u32,
            n: l.out as u32,
            k: l.inp as u32,
            trans_a: false,
            trans_b: true,
            broadcast_b: true,
            bias: l.bias.is_some(),
            alpha: 1.0,
            weight_format: l.format,
        };
        let mut inputs = vec![x, &l.w];
        inputs.extend(l.scales.as_ref());
        inputs.extend(l.bias.as_ref());
        self.op(&op, &inputs, &[rows, l.out], label)
    }

    fn rms_norm(&self, x: &Tensor, w: &Tensor, rows: usize) -> Result<Tensor> {
        let cols = self.cfg.hidden_size;
        let op = Op::RmsNorm {
            rows: rows as u32,
            cols: cols as u32,
            eps: self.cfg.rms_norm_eps,
        };
        self.op(&op, &[x, w], &[rows, cols], "rmsnorm")
    }

    fn add(&self, a: &Tensor, b: &Tensor, len: usize) -> Result<Tensor> {
        let len = len as u32;
        self.op(
            &Op::Add { len, b_len: len },
            &[a, b],
            &[len as usize],
            "residual",
        )
    }

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
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let (hq, hkv) = (cfg.num_attention_heads, cfg.kv_heads());
        let g = *cache.geometry();
        if (g.layers as usize, g.kv_heads as usize, g.head_dim as usize)
            != (cfg.num_hidden_layers, hkv, hd)
        {
            return Err(Error::invalid(format!(
                "KV cache geometry {g:?} does not match the model's layers, KV heads and head dim"
            )));
        }
        let n = inp.n;
        let (per_segment, stride) = cache.segment_shape();
        let segments = cache.segments();
        let width = inp.table_shape[1];
        let rt = &self.rt;
        let (ids_t, pos_t, meta_t, tables_t) = (ix.ids, ix.positions, ix.meta, ix.tables);
        let slot_t = &ix.slots;
        let e = &self.weights.embed;
        let embed = Op::Embedding {
            vocab: cfg.vocab_size as u32,
            dim: h as u32,
            rows: n as u32,
            weight_format: e.format,
        };
        let mut inputs = vec![&e.w];
        inputs.extend(e.scales.as_ref());
        inputs.push(&s.held[ids_t]);
        let mut x = self.op(&embed, &inputs, &[n, h], "embeddings")?;
        let used = inp.reached();
        for (li, layer) in self.weights.layers.iter().enumerate() {
            let step = |x: &Tensor| -> Result<Tensor> {
                let hn = self.rms_norm(x, &layer.attn_norm, n)?;
                let q = self.linear(&hn, &layer.q, n, "q");
                let k = self.linear(&hn, &layer.k, n, "k");
                let v = self.linear(&hn, &layer.v, n, "v");
                rt.free(hn)?;
                let (q, k, v) = (q?, k?, v?);
                let rope = |t: Tensor, heads: usize| -> Result<Tensor> {
                    let op = Op::Rope {
                        tokens: n as u32,
                        heads: heads as u32,
                        head_dim: hd as u32,
                        theta: cfg.rope_theta,
                    };
                    let r = self.op(&op, &[&t, &s.held[pos_t]], &[n, heads * hd], "rope");
                    rt.free(t)?;
                    r
                };
                let q = rope(q, hq)?;
                let k = rope(k, hkv)?;
                for &si in &used {
                    let Some(st) = slot_t[si] else { continue };
                    let op = Op::KvWrite {
                        kv: g.layout(),
                        blocks: (segments[si].size() / stride) as u32,
                        stride: stride as u32,
                        layer: li as u32,
                        tokens: n as u32,
                    };
                    rt.dispatch(&op, &[&k, &v, &s.held[st]], &[&segments[si]])?;
                }
                rt.free(k)?;
                rt.free(v)?;
                let mut carry: Option<Tensor> = None;
                let mut attn = None;
                for (j, &si) in used.iter().enumerate() {
                    let last = j + 1 == used.len();
                    let op = Op::PagedAttention {
                        kv: g.layout(),
                        blocks: (segments[si].size() / stride) as u32,
                        stride: stride as u32,
                        first_block: (si * per_segment) as u32,
                        layer: li as u32,
                        tokens: n as u32,
                        q_heads: hq as u32,
                        rows: inp.rows as u32,
                        width: width as u32,
                        scale: 1.0 / (hd as f32).sqrt(),
                        carry_in: carry.is_some(),
                        carry_out: !last,
                    };
                    let mut ins = vec![&q, &segments[si], &s.held[tables_t], &s.held[meta_t]];
                    ins.extend(carry.as_ref());
                    let shape = if last {
                        vec![n, hq * hd]
                    } else {
                        vec![n, hq, hd + 2]
                    };
                    let out = self.op(&op, &ins, &shape, "attention");
                    if let Some(c) = carry.take() {
                        rt.free(c)?;
                    }
                    if last {
                        attn = Some(out?);
                    } else {
                        carry = Some(out?);
                    }
                }
                rt.free(q)?;
                let attn = attn.ok_or_else(|| Error::invalid("forward: no KV segment reached"))?;
                let o = self.linear(&attn, &layer.o, n, "attn out");
                rt.free(attn)?;
                let o = o?;
                let x1 = self.add(x, &o, n * h);
                rt.free(o)?;
                let x1 = x1?;
                let hn = self.rms_norm(&x1, &layer.mlp_norm, n)?;
                let gate = self.linear(&hn, &layer.gate, n, "gate");
                let up = self.linear(&hn, &layer.up, n, "up");
                rt.free(hn)?;
                let (gate, up) = (gate?, up?);
                let len = (n * cfg.intermediate_size) as u32;
                let a = self.op(
                    &Op::SiluMul { len },
                    &[&gate, &up],
                    &[len as usize],
                    "swiglu",
                );
                rt.free(gate)?;
                rt.free(up)?;
                let a = a?;
                let d = self.linear(&a, &layer.down, n, "down");
                rt.free(a)?;
                let d = d?;
                let x2 = self.add(&x1, &d, n * h);
                rt.free(x1)?;
                rt.free(d)?;
                x2
            };
            let next = step(&x);
            rt.free(x)?;
            x = next?;
        }
        let (r, Some(rows_t)) = (inp.logit_rows(), ix.logit_rows) else {
            rt.free(x)?;
            return Ok(None);
        };
        let gather = Op::Embedding {
            vocab: n as u32,
            dim: h as u32,
            rows: r as u32,
            weight_format: WeightFormat::F32,
        };
        let last = self.op(&gather, &[&x, &s.held[rows_t]], &[r, h], "last rows");
        rt.free(x)?;
        let last = s.keep(last?);
        let xn = s.keep(self.rms_norm(&s.held[last], &self.weights.norm, r)?);
        let head = self.weights.lm_head.as_ref().unwrap_or(&self.weights.embed);
        Ok(Some(s.keep(self.linear(&s.held[xn], head, r, "logits")?)))
    }
}
