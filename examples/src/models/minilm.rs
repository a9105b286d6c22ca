//! all-MiniLM-L6-v2 (a 6-layer BERT encoder) as a tensormem graph, for sentence embeddings.
//!
//! One graph per (batch, seq) shape, compiled on first use and cached:
//! ```text
//! ids, positions, types [b·s] ─ 3 embedding gathers ─ add ─ add ─ layernorm ─ x [b·s, 384]
//! per layer (6×):
//!   q,k,v = linear(x)                      [b·s, 384]          → reshape [b, s, 12, 32]
//!   permute (0,2,1,3)                      [b, 12, s, 32]      (head split)
//!   scores = q·kᵀ / √32   (batched, 12·b)  [b·12, s, s]
//!   probs = masked softmax (mask row per sentence, rows_per_mask = 12·s)
//!   ctx = probs·v                          [b·12, s, 32] → permute back [b, s, 12, 32] = [b·s, 384]
//!   x = layernorm(x + linear(ctx))                 (post-LN, eps 1e-12)
//!   x = layernorm(x + linear(gelu_erf(linear(x)))) (384 → 1536 → 384)
//! masked mean pool over s ─ L2 normalise ─ embeddings [b, 384]
//! ```
//! Sentences of a batch are padded to the longest; the attention mask drops padded keys in the
//! softmax and padded tokens in the mean, so a padded batch embeds every sentence as it embeds
//! alone. The pooler (`pooler.dense`, tanh) is not part of sentence embeddings and is not loaded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tensormem::{DType, Error, Model, Op, Result, Runtime, TensorId, WeightFormat};

use super::builder::{ModelBuilder, dim};
use super::tokenize::{TokenBatch, WordPiece};
use super::weights::WeightFile;
use crate::cli::DeviceBudget;
use tensormem::offload::Score;

mod consistency;
mod placed;
use consistency::{check_ids, check_weights_match};
pub use placed::PlacedMiniLm;

/// The fields of `config.json` the graph needs (a BERT config).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BertConfig {
    /// Hidden size (384).
    pub hidden_size: usize,
    /// Attention heads (12; head size 32).
    pub num_attention_heads: usize,
    /// Encoder layers (6).
    pub num_hidden_layers: usize,
    /// Feed-forward size (1536).
    pub intermediate_size: usize,
    /// LayerNorm epsilon (1e-12).
    pub layer_norm_eps: f32,
    /// Word-piece vocabulary (30522).
    pub vocab_size: usize,
    /// Longest sequence the position table covers (512).
    pub max_position_embeddings: usize,
    /// Token types (2).
    pub type_vocab_size: usize,
    /// Activation; only `"gelu"` (the exact erf form) is supported.
    pub hidden_act: String,
}

impl BertConfig {
    /// Reads and checks `config.json` (see [`BertConfig::check`]).
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Malformed`] for bad JSON or a config [`BertConfig::check`] refuses.
    pub fn open(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let malformed = |message: String| Error::Malformed {
            source_name: path.display().to_string(),
            line: 0,
            message,
        };
        let cfg: BertConfig =
            serde_json::from_str(&text).map_err(|e| malformed(format!("config: {e}")))?;
        cfg.check().map_err(malformed)?;
        Ok(cfg)
    }

    /// Checks what the graph relies on: the exact erf `gelu`, every size at least 1, a hidden
    /// size divisible by the head count, and a finite `layer_norm_eps > 0` (0 divides a constant
    /// row by zero, a negative one takes the square root of a negative variance: both give NaN).
    ///
    /// # Errors
    /// A message naming the offending field.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act {:?}: only the exact erf \"gelu\" is supported",
                self.hidden_act
            ));
        }
        for (name, v) in [
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_hidden_layers", self.num_hidden_layers),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 {
                return Err(format!("{name} is 0"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(format!(
                "layer_norm_eps {} must be a finite number above 0 (all-MiniLM-L6-v2 uses 1e-12)",
                self.layer_norm_eps
            ));
        }
        Ok(())
    }

    /// The configuration of all-MiniLM-L6-v2 (as its `config.json`), for graph-only uses such as
    /// the peak table when the model files are not fetched.
    pub fn all_minilm_l6_v2() -> Self {
        BertConfig {
            hidden_size: 384,
            num_attention_heads: 12,
            num_hidden_layers: 6,
            intermediate_size: 1536,
            layer_norm_eps: 1e-12,
            vocab_size: 30522,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            hidden_act: "gelu".into(),
        }
    }

    /// Size of one attention head.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// The default model cache: `$TENSORMEM_CACHE/minilm`, else `$HOME/.cache/tensormem/minilm`
/// (where `scripts/fetch_minilm.sh` unpacks the model).
pub fn default_model_dir() -> PathBuf {
    let base = match std::env::var_os("TENSORMEM_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".cache")
            .join("tensormem"),
    };
    base.join("minilm")
}

/// The files a model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["model.safetensors", "config.json", "tokenizer.json"];

/// Whether `dir` holds the three model files.
pub fn model_dir_ready(dir: &Path) -> bool {
    MODEL_FILES.iter().all(|f| dir.join(f).is_file())
}

/// The MiniLM graph for one (batch, seq) shape, before compilation.
pub struct MiniLmGraph {
    /// The graph and its declared weights.
    pub builder: ModelBuilder,
    /// Input word-piece ids `[batch·seq]` (u32).
    pub ids: TensorId,
    /// Input position ids `[batch·seq]` (u32).
    pub positions: TensorId,
    /// Input token type ids `[batch·seq]` (u32).
    pub type_ids: TensorId,
    /// Input attention mask `[batch, seq]` (f32, 1 keep / 0 pad).
    pub mask: TensorId,
    /// Output normalised embeddings `[batch, hidden]`.
    pub embeddings: TensorId,
}

/// Builds the encoder graph for `batch` sentences of `seq` tokens.
///
/// # Errors
/// [`Error::InvalidArgument`] for a zero batch or sequence, or a sequence longer than the position
/// table; graph shape checks.
/// The word, position and type embedding tables and every linear weight are stored in `format`;
/// biases and LayerNorm parameters stay f32.
pub fn build_graph(
    cfg: &BertConfig,
    batch: usize,
    seq: usize,
    format: WeightFormat,
) -> Result<MiniLmGraph> {
    if batch == 0 || seq == 0 {
        return Err(Error::invalid(format!(
            "minilm: batch {batch} and sequence {seq} must both be at least 1"
        )));
    }
    if seq > cfg.max_position_embeddings {
        return Err(Error::invalid(format!(
            "minilm: sequence of {seq} tokens exceeds the {} positions of the model",
            cfg.max_position_embeddings
        )));
    }
    let (h, nh, hd, ff) = (
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.head_size(),
        cfg.intermediate_size,
    );
    let rows = batch * seq;
    let (b32, s32, h32, nh32, hd32) = (dim(batch)?, dim(seq)?, dim(h)?, dim(nh)?, dim(hd)?);
    let (rows32, hidden_len) = (dim(rows)?, dim(rows * h)?);
    let eps = cfg.layer_norm_eps;

    let mut b = ModelBuilder::with_format(format);
    let g = &mut b.graph;
    let ids = g.input("input_ids", DType::U32, &[rows]);
    let positions = g.input("position_ids", DType::U32, &[rows]);
    let type_ids = g.input("token_type_ids", DType::U32, &[rows]);
    let mask = g.input("attention_mask", DType::F32, &[batch, seq]);

    let gather =
        |b: &mut ModelBuilder, table: &str, vocab: usize, idx: TensorId| -> Result<TensorId> {
            let mut inputs = b.packed_weight(&format!("embeddings.{table}.weight"), &[vocab, h]);
            inputs.push(idx);
            let op = Op::Embedding {
                vocab: dim(vocab)?,
                dim: h32,
                rows: rows32,
                weight_format: b.format,
            };
            b.op(op, &inputs, &[rows, h], table)
        };
    let add = |b: &mut ModelBuilder, x: TensorId, y: TensorId, label: &str| {
        let op = Op::Add {
            len: hidden_len,
            b_len: hidden_len,
        };
        b.op(op, &[x, y], &[rows, h], label)
    };
    let layer_norm = |b: &mut ModelBuilder, x: TensorId, prefix: &str| {
        let gamma = b.weight(&format!("{prefix}.weight"), &[h]);
        let beta = b.weight(&format!("{prefix}.bias"), &[h]);
        let op = Op::LayerNorm {
            rows: rows32,
            cols: h32,
            eps,
        };
        b.op(op, &[x, gamma, beta], &[rows, h], prefix)
    };

    let word = gather(&mut b, "word_embeddings", cfg.vocab_size, ids)?;
    let pos = gather(
        &mut b,
        "position_embeddings",
        cfg.max_position_embeddings,
        positions,
    )?;
    let typ = gather(
        &mut b,
        "token_type_embeddings",
        cfg.type_vocab_size,
        type_ids,
    )?;
    let sum = add(&mut b, word, pos, "embeddings.add_position")?;
    let sum = add(&mut b, sum, typ, "embeddings.add_type")?;
    let mut x = layer_norm(&mut b, sum, "embeddings.LayerNorm")?;

    // [batch, seq, heads, head] <-> [batch, heads, seq, head]
    let split = Op::Permute {
        dims: [b32, s32, nh32, hd32],
        perm: [0, 2, 1, 3],
    };
    let merge = Op::Permute {
        dims: [b32, nh32, s32, hd32],
        perm: [0, 2, 1, 3],
    };
    let heads_shape = [batch, nh, seq, hd];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        let head = |b: &mut ModelBuilder, which: &str| -> Result<TensorId> {
            let t = b.linear(x, &format!("{p}.attention.self.{which}"), rows, h, h)?;
            let t = b.graph.reshape(t, &[batch, seq, nh, hd])?;
            b.op(
                split.clone(),
                &[t],
                &heads_shape,
                &format!("{p}.{which}.split_heads"),
            )
        };
        let q = head(&mut b, "query")?;
        let k = head(&mut b, "key")?;
        let v = head(&mut b, "value")?;
        let scores_op = Op::MatMul {
            batch: dim(batch * nh)?,
            m: s32,
            n: s32,
            k: hd32,
            trans_a: false,
            trans_b: true,
            broadcast_b: false,
            bias: false,
            alpha: 1.0 / (hd as f32).sqrt(),
            weight_format: WeightFormat::F32,
        };
        let scores = b.op(
            scores_op,
            &[q, k],
            &[batch * nh, seq, seq],
            &format!("{p}.scores"),
        )?;
        let softmax = Op::Softmax {
            rows: dim(batch * nh * seq)?,
            cols: s32,
            masked: true,
            rows_per_mask: dim(nh * seq)?,
        };
        let probs = b.op(
            softmax,
            &[scores, mask],
            &[batch * nh, seq, seq],
            &format!("{p}.probs"),
        )?;
        let ctx_op = Op::MatMul {
            batch: dim(batch * nh)?,
            m: s32,
            n: hd32,
            k: s32,
            trans_a: false,
            trans_b: false,
            broadcast_b: false,
            bias: false,
            alpha: 1.0,
            weight_format: WeightFormat::F32,
        };
        let ctx = b.op(ctx_op, &[probs, v], &heads_shape, &format!("{p}.context"))?;
        let ctx = b.op(
            merge.clone(),
            &[ctx],
            &[batch, seq, nh, hd],
            &format!("{p}.merge_heads"),
        )?;
        let ctx = b.graph.reshape(ctx, &[rows, h])?;

        let attn = b.linear(ctx, &format!("{p}.attention.output.dense"), rows, h, h)?;
        let res = add(&mut b, attn, x, &format!("{p}.attention.residual"))?;
        let x1 = layer_norm(&mut b, res, &format!("{p}.attention.output.LayerNorm"))?;

        let inter = b.linear(x1, &format!("{p}.intermediate.dense"), rows, h, ff)?;
        let gelu = Op::Gelu {
            len: dim(rows * ff)?,
        };
        let act = b.op(gelu, &[inter], &[rows, ff], &format!("{p}.gelu"))?;
        let out = b.linear(act, &format!("{p}.output.dense"), rows, ff, h)?;
        let res = add(&mut b, out, x1, &format!("{p}.output.residual"))?;
        x = layer_norm(&mut b, res, &format!("{p}.output.LayerNorm"))?;
    }

    let hidden = b.graph.reshape(x, &[batch, seq, h])?;
    let pool = Op::MeanPool {
        batch: b32,
        seq: s32,
        dim: h32,
    };
    let pooled = b.op(pool, &[hidden, mask], &[batch, h], "mean_pool")?;
    // sentence-transformers' Normalize is F.normalize (eps 1e-12).
    let norm = Op::L2Normalize {
        rows: b32,
        cols: h32,
        eps: 1e-12,
    };
    let embeddings = b.op(norm, &[pooled], &[batch, h], "l2_normalize")?;
    b.graph.output(embeddings);
    Ok(MiniLmGraph {
        builder: b,
        ids,
        positions,
        type_ids,
        mask,
        embeddings,
    })
}

/// One compiled shape.
struct Compiled {
    graph: MiniLmGraph,
    model: Model,
    /// Last use (a counter), for evicting the least recently used shape.
    last_use: u64,
}

/// Compiled shapes kept at most; a new shape beyond it evicts the least recently used one. The
/// shapes share one copy of the weights (the runtime's weight store), so a shape costs only its
/// activation arena and inputs.
pub const MAX_CACHED_SHAPES: usize = 4;

/// Sentence embeddings of one batch.
#[derive(Clone, Debug)]
pub struct Embeddings {
    /// One normalised vector per sentence.
    pub vectors: Vec<Vec<f32>>,
    /// The tokenized batch.
    pub tokens: TokenBatch,
}

/// all-MiniLM-L6-v2 on one runtime: weights and tokenizer in memory, one compiled graph per
/// (batch, seq) shape.
pub struct MiniLm {
    rt: Runtime,
    cfg: BertConfig,
    weights: WeightFile,
    /// Format the graphs read their embedding tables and linear weights in.
    format: WeightFormat,
    tokenizer: WordPiece,
    cache: HashMap<(usize, usize), Compiled>,
    clock: u64,
    /// Device budget every shape is compiled within (`None`: no budget).
    budget: Option<DeviceBudget>,
    /// Offload scores a budgeted compile tries.
    scores: Vec<Score>,
}

impl MiniLm {
    /// Loads the model files from `dir` (see [`MODEL_FILES`]) and checks them against each
    /// other before anything runs: the config ([`BertConfig::check`]), every weight finite
    /// ([`WeightFile::open`]), every tensor the graph reads present with the shape the config
    /// implies, and no encoder layer or other tensor the config does not account for (a config
    /// that says 6 layers over 12-layer weights would otherwise run and silently drop half the
    /// model). Only `pooler.*`, which sentence embeddings do not use, may be left over.
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::Malformed`] for a missing or bad file, [`Error::SizeMismatch`]
    /// for a weight whose shape disagrees with the config.
    pub fn open(rt: &Runtime, dir: &Path) -> Result<Self> {
        Self::open_as(rt, dir, WeightFormat::F32)
    }

    /// [`MiniLm::open`] with the embedding tables and linear weights held on the device in
    /// `format` (converted at load when `model.safetensors` stores them otherwise, e.g. f32 to
    /// int8; read as they are from a file `tensormem-quantize` wrote in that format).
    ///
    /// # Errors
    /// As [`MiniLm::open`].
    pub fn open_as(rt: &Runtime, dir: &Path, format: WeightFormat) -> Result<Self> {
        let weights = WeightFile::open(&dir.join("model.safetensors"))?;
        Self::with_weights(rt, dir, weights, format)
    }

    /// [`MiniLm::open_as`] with `weights` instead of the directory's `model.safetensors` (a file
    /// `tensormem-quantize` wrote, say); the config and tokenizer still come from `dir`.
    ///
    /// # Errors
    /// As [`MiniLm::open`].
    pub fn with_weights(
        rt: &Runtime,
        dir: &Path,
        weights: WeightFile,
        format: WeightFormat,
    ) -> Result<Self> {
        let cfg = BertConfig::open(&dir.join("config.json"))?;
        check_weights_match(&cfg, &weights)?;
        let tokenizer = WordPiece::open(&dir.join("tokenizer.json"))?;
        Ok(MiniLm {
            rt: rt.clone(),
            cfg,
            weights,
            format,
            tokenizer,
            cache: HashMap::new(),
            clock: 0,
            budget: None,
            scores: Score::ALL.to_vec(),
        })
    }

    /// Compiles every shape from now on within `budget` (shapes compiled before are dropped).
    pub fn set_device_budget(&mut self, budget: Option<DeviceBudget>) {
        if self.budget != budget {
            self.cache.clear();
            self.budget = budget;
        }
    }

    /// Tries only `scores` in budgeted compiles from now on (shapes compiled before are dropped).
    pub fn set_offload_scores(&mut self, scores: &[Score]) {
        if self.scores != scores {
            self.cache.clear();
            self.scores = scores.to_vec();
        }
    }

    /// The model configuration.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// The compiled model of shape (`batch`, `seq`), compiling it and uploading its weights on
    /// first use.
    ///
    /// # Errors
    /// Graph, compile and upload errors.
    pub fn model_for(&mut self, batch: usize, seq: usize) -> Result<&mut Model> {
        self.clock += 1;
        let key = (batch, seq);
        if !self.cache.contains_key(&key) {
            if self.cache.len() >= MAX_CACHED_SHAPES {
                let oldest = self
                    .cache
                    .iter()
                    .min_by_key(|(_, c)| c.last_use)
                    .map(|(k, _)| *k);
                if let Some(k) = oldest {
                    self.cache.remove(&k);
                }
            }
            let graph = build_graph(&self.cfg, batch, seq, self.format)?;
            let mut model = crate::cli::compile_scored(
                &self.rt,
                &graph.builder.graph,
                self.budget,
                &self.scores,
            )?;
            graph.builder.upload_weights(&mut model, &self.weights)?;
            self.cache.insert(
                key,
                Compiled {
                    graph,
                    model,
                    last_use: 0,
                },
            );
        }
        let entry = self
            .cache
            .get_mut(&key)
            .ok_or_else(|| Error::invalid("minilm: shape cache lost an entry just inserted"))?;
        entry.last_use = self.clock;
        Ok(&mut entry.model)
    }

    /// Uploads a tokenized batch into its shape's model (compiling it if needed).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a token, type or position id outside its embedding table
    /// (the tokenizer and config disagree: such an id would read no row); as
    /// [`MiniLm::model_for`]; upload errors.
    pub fn set_tokens(&mut self, tokens: &TokenBatch) -> Result<()> {
        check_ids(&self.cfg, tokens)?;
        self.model_for(tokens.batch, tokens.seq)?;
        let entry = self.entry_mut(tokens.batch, tokens.seq)?;
        let g = &entry.graph;
        let m = &mut entry.model;
        m.set_input(g.ids, bytemuck::cast_slice(&tokens.ids))?;
        m.set_input(g.positions, bytemuck::cast_slice(&tokens.positions))?;
        m.set_input(g.type_ids, bytemuck::cast_slice(&tokens.type_ids))?;
        m.set_input(g.mask, bytemuck::cast_slice(&tokens.mask))?;
        Ok(())
    }

    /// Runs the model of shape (`batch`, `seq`) on the inputs last set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when that shape was never set up; runtime errors.
    pub fn run(&mut self, batch: usize, seq: usize) -> Result<()> {
        self.entry_mut(batch, seq)?.model.run().map(|_| ())
    }

    /// Reads the embeddings of the last run of shape (`batch`, `seq`).
    ///
    /// # Errors
    /// As [`MiniLm::run`].
    pub fn read_embeddings(&mut self, batch: usize, seq: usize) -> Result<Vec<Vec<f32>>> {
        let h = self.cfg.hidden_size;
        let entry = self.entry_mut(batch, seq)?;
        let flat: Vec<f32> = entry.model.read_output(entry.graph.embeddings)?;
        super::checks::finite("minilm embeddings", &flat, h)?;
        Ok(flat.chunks_exact(h).map(<[f32]>::to_vec).collect())
    }

    /// Tokenizes `sentences` into one padded batch, runs the encoder once and returns one
    /// normalised embedding per sentence.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list; tokenizer, graph and runtime errors.
    pub fn embed<S: AsRef<str>>(&mut self, sentences: &[S]) -> Result<Embeddings> {
        let tokens = self.tokenizer.encode_batch(sentences)?;
        self.set_tokens(&tokens)?;
        self.run(tokens.batch, tokens.seq)?;
        let vectors = self.read_embeddings(tokens.batch, tokens.seq)?;
        Ok(Embeddings { vectors, tokens })
    }

    fn entry_mut(&mut self, batch: usize, seq: usize) -> Result<&mut Compiled> {
        self.cache.get_mut(&(batch, seq)).ok_or_else(|| {
            Error::invalid(format!(
                "minilm: no compiled graph for batch {batch} x seq {seq}; set tokens of that shape first"
            ))
        })
    }

    /// The compiled model of shape (`batch`, `seq`), if it is cached.
    pub fn cached_model(&self, batch: usize, seq: usize) -> Option<&Model> {
        self.cache.get(&(batch, seq)).map(|c| &c.model)
    }
}

/// Cosine similarity of two vectors (0 when either is all zeros).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests;
