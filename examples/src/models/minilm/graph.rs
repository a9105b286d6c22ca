//! The MiniLM graph itself: the BERT config, the encoder graph for one (batch, seq) shape and
//! the cosine similarity. Kept apart from file I/O, the tokenizer and the blocking driver
//! ([`super::MiniLm`]) so that the browser sample (`tensormem-browser`) compiles this same file for
//! wasm32 and runs the same graph.

use serde::Deserialize;
use tensormem::{DType, Error, Op, Result, TensorId, WeightFormat};

use crate::models::builder::{ModelBuilder, dim};

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
    /// Parses and checks the text of a `config.json` (see [`BertConfig::check`]); `source` names
    /// it in errors.
    ///
    /// # Errors
    /// [`Error::Malformed`] for bad JSON or a config [`BertConfig::check`] refuses.
    pub fn from_json(text: &str, source: &str) -> Result<Self> {
        let malformed = |message: String| Error::Malformed {
            source_name: source.to_string(),
            line: 0,
            message,
        };
        let cfg: BertConfig =
            serde_json::from_str(text).map_err(|e| malformed(format!("config: {e}")))?;
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

/// Builds the encoder graph for `batch` sentences of `seq` tokens, each layer's attention in one
/// chain ([`build_graph_chunked`] with one chunk).
///
/// # Errors
/// As [`build_graph_chunked`].
pub fn build_graph(
    cfg: &BertConfig,
    batch: usize,
    seq: usize,
    format: WeightFormat,
) -> Result<MiniLmGraph> {
    build_graph_chunked(cfg, batch, seq, format, 1)
}

/// The attention chunk counts a batch of `batch` sentences allows, ascending: the divisors of
/// `batch` (a chunk holds whole sentences, since the softmax reads one mask row per sentence).
pub fn attention_chunk_counts(batch: usize) -> Vec<u32> {
    (1..=batch)
        .filter(|c| batch.is_multiple_of(*c))
        .filter_map(|c| u32::try_from(c).ok())
        .collect()
}

/// How each layer's attention and feed-forward block are tiled ([`build_graph_tiled`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// Chunks of whole sentences each layer's attention runs in (a divisor of the batch).
    pub attention: u32,
    /// Chunks of rows (tokens) each layer's feed-forward block runs in (a divisor of
    /// `batch·seq`).
    pub ffn: u32,
    /// Whether the chunks' input and output slices are staged through tensors of their own
    /// ([`tensormem::Graph::tile_staged`]), so a budget can move each slice alone.
    pub staged: bool,
}

impl Tiling {
    /// Neither tiled: the plain graph.
    pub const NONE: Tiling = Tiling {
        attention: 1,
        ffn: 1,
        staged: false,
    };
}

/// Tiles `nodes` of `graph` into `parts`, staged or through views.
fn tile(
    graph: &mut tensormem::Graph,
    nodes: std::ops::Range<usize>,
    parts: u32,
    staged: bool,
) -> Result<()> {
    if staged {
        graph.tile_staged(nodes, parts)
    } else {
        graph.tile(nodes, parts)
    }
}

/// The feed-forward chunk counts a batch of `batch` sentences of `seq` tokens allows, ascending:
/// the divisors of `batch·seq` (a chunk holds whole rows of tokens). [`build_graph_tiled`]
/// refuses the counts whose chunks would not be bit-identical ([`tensormem::Graph::tile`]).
pub fn ffn_chunk_counts(batch: usize, seq: usize) -> Vec<u32> {
    let rows = batch * seq;
    (1..=rows)
        .filter(|c| rows.is_multiple_of(*c))
        .filter_map(|c| u32::try_from(c).ok())
        .collect()
}

/// [`build_graph_tiled`] with the attention in `attention_chunks` chunks and the feed-forward
/// blocks untiled.
///
/// # Errors
/// As [`build_graph_tiled`].
pub fn build_graph_chunked(
    cfg: &BertConfig,
    batch: usize,
    seq: usize,
    format: WeightFormat,
    attention_chunks: u32,
) -> Result<MiniLmGraph> {
    let tiling = Tiling {
        attention: attention_chunks,
        ffn: 1,
        staged: false,
    };
    build_graph_tiled(cfg, batch, seq, format, tiling)
}

/// Builds the encoder graph for `batch` sentences of `seq` tokens, with each layer's attention
/// (q/k/v projections and head splits → scores → masked softmax → context → head merge) tiled
/// into `tiling.attention` chunks of whole sentences and each feed-forward block
/// (intermediate.dense → gelu → output.dense → residual → LayerNorm) into `tiling.ffn` chunks of
/// rows ([`tensormem::Graph::tile`]). Each attention chunk's q, k, v, scores and probabilities
/// are a `1/attention` part, and its merged context is written into a view of the layer's
/// context tensor; each feed-forward chunk's intermediate activations are a `1/ffn` part, and its
/// output is written into a view of the layer's output (with `tiling.staged`, into a part tensor
/// copied there after the last chunk, and the chunks read copies of their input slices).
/// The largest ops' working sets (the softmax: `2·batch·heads·seq²` floats; the gelu:
/// `2·batch·seq·intermediate`) shrink by the chunk counts, and every element is computed as in
/// the untiled graph, so the embeddings are bit-identical. One chunk each is the untiled graph.
///
/// # Errors
/// [`tensormem::ArgumentError`] for a zero batch or sequence, a sequence longer than the position
/// table, an attention chunk count that does not divide the batch ([`attention_chunk_counts`]),
/// a feed-forward chunk count that does not divide `batch·seq`;
/// [`tensormem::GraphError::Untileable`] for one whose chunks the host would compute with other
/// roundings ([`ffn_chunk_counts`]); graph shape checks.
/// The word, position and type embedding tables and every linear weight are stored in `format`;
/// biases and LayerNorm parameters stay f32.
pub fn build_graph_tiled(
    cfg: &BertConfig,
    batch: usize,
    seq: usize,
    format: WeightFormat,
    tiling: Tiling,
) -> Result<MiniLmGraph> {
    let Tiling {
        attention: attention_chunks,
        ffn: ffn_chunks,
        staged,
    } = tiling;
    if attention_chunks == 0 || !batch.is_multiple_of(attention_chunks as usize) {
        return Err(tensormem::ArgumentError::invalid_value(
            "minilm attention chunks",
            attention_chunks.to_string(),
            format!(
                "a count that divides the batch of {batch}, as a chunk holds whole sentences: {:?}",
                attention_chunk_counts(batch)
            ),
        )
        .into());
    }
    if ffn_chunks == 0 || !(batch * seq).is_multiple_of(ffn_chunks as usize) {
        return Err(tensormem::ArgumentError::invalid_value(
            "minilm feed-forward chunks",
            ffn_chunks.to_string(),
            format!(
                "a count that divides the {} rows of {batch}x{seq} tokens (a chunk holds whole \
                 rows)",
                batch * seq
            ),
        )
        .into());
    }
    if batch == 0 || seq == 0 {
        let what = if batch == 0 {
            "minilm batch"
        } else {
            "minilm sequence length"
        };
        return Err(tensormem::ArgumentError::zero(what).into());
    }
    if seq > cfg.max_position_embeddings {
        return Err(tensormem::ArgumentError::too_many(
            "minilm sequence tokens (the model's positions)",
            seq as u64,
            cfg.max_position_embeddings as u64,
        )
        .into());
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
        let attn_first = b.graph.nodes().len();
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
        let ctx_op = Op::batched_matmul(dim(batch * nh)?, s32, hd32, s32);
        let ctx = b.op(ctx_op, &[probs, v], &heads_shape, &format!("{p}.context"))?;
        let ctx = b.op(
            merge.clone(),
            &[ctx],
            &[batch, seq, nh, hd],
            &format!("{p}.merge_heads"),
        )?;
        let end = b.graph.nodes().len();
        tile(&mut b.graph, attn_first..end, attention_chunks, staged)?;
        let ctx = b.graph.reshape(ctx, &[rows, h])?;

        let attn = b.linear(ctx, &format!("{p}.attention.output.dense"), rows, h, h)?;
        let res = add(&mut b, attn, x, &format!("{p}.attention.residual"))?;
        let x1 = layer_norm(&mut b, res, &format!("{p}.attention.output.LayerNorm"))?;

        let ffn_first = b.graph.nodes().len();
        let inter = b.linear(x1, &format!("{p}.intermediate.dense"), rows, h, ff)?;
        let gelu = Op::Gelu {
            len: dim(rows * ff)?,
        };
        let act = b.op(gelu, &[inter], &[rows, ff], &format!("{p}.gelu"))?;
        let out = b.linear(act, &format!("{p}.output.dense"), rows, ff, h)?;
        let res = add(&mut b, out, x1, &format!("{p}.output.residual"))?;
        x = layer_norm(&mut b, res, &format!("{p}.output.LayerNorm"))?;
        let end = b.graph.nodes().len();
        tile(&mut b.graph, ffn_first..end, ffn_chunks, staged)?;
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

/// Every pair's cosine similarity: row `i`, column `j` compares `vectors[i]` with `vectors[j]`.
pub fn cosine_matrix(vectors: &[Vec<f32>]) -> Vec<Vec<f32>> {
    vectors
        .iter()
        .map(|a| vectors.iter().map(|b| cosine(a, b)).collect())
        .collect()
}
