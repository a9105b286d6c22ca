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
//! Under a device budget the attention chain may run in chunks of whole sentences and the
//! feed-forward block in chunks of rows ([`Chunks`], [`build_graph_tiled`]): at sequence 512 one
//! layer's scores and probabilities are 100.7 MB each, more than half of what the whole model
//! needs, and its gelu binds 50 MB.
//! Sentences of a batch are padded to the longest; the attention mask drops padded keys in the
//! softmax and padded tokens in the mean, so a padded batch embeds every sentence as it embeds
//! alone. The pooler (`pooler.dense`, tanh) is not part of sentence embeddings and is not loaded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tensormem::{Error, Model, Result, Runtime, WeightFormat};

use super::tokenize::{TokenBatch, WordPiece};
use super::weights::WeightFile;
use crate::cli::DeviceBudget;
use tensormem::offload::Score;

mod consistency;
mod graph;
mod placed;
mod tiling;
use consistency::{check_ids, check_weights_match};
pub use graph::{
    BertConfig, MiniLmGraph, Tiling, attention_chunk_counts, build_graph, build_graph_chunked,
    build_graph_tiled, cosine, cosine_matrix, ffn_chunk_counts,
};
pub use placed::PlacedMiniLm;
pub use tiling::{AttentionChunks, Chunks};

impl BertConfig {
    /// Reads and checks `config.json` (see [`BertConfig::from_json`]).
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Malformed`] for bad JSON or a config [`BertConfig::check`] refuses.
    pub fn open(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
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

/// One compiled shape.
struct Compiled {
    graph: MiniLmGraph,
    model: Model,
    /// How its attention and feed-forward blocks are tiled.
    tiling: Tiling,
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
    /// Budgeted compiles put their copies on the transfer lane (`CompileDesc::transfer_lane`).
    transfer_lane: bool,
    /// Budgeted compiles may recompute activations (`CompileDesc::recompute`).
    recompute: bool,
    /// Where budgeted compiles take the planner's rates from (`CompileDesc::rates`).
    rates: tensormem::Rates,
    /// How the attention of every shape compiled from now on is tiled.
    chunks: Chunks,
    /// How the feed-forward blocks of every shape compiled from now on are tiled.
    ffn_chunks: Chunks,
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
            transfer_lane: true,
            recompute: true,
            rates: tensormem::Rates::Measured,
            chunks: Chunks::Auto,
            ffn_chunks: Chunks::Auto,
        })
    }

    /// Tiles the attention of every shape from now on as `chunks` says (shapes compiled before
    /// are dropped). The default is [`Chunks::Auto`].
    pub fn set_attention_chunks(&mut self, chunks: Chunks) {
        if self.chunks != chunks {
            self.cache.clear();
            self.chunks = chunks;
        }
    }

    /// Tiles the feed-forward blocks of every shape from now on as `chunks` says (shapes
    /// compiled before are dropped). The default is [`Chunks::Auto`].
    pub fn set_ffn_chunks(&mut self, chunks: Chunks) {
        if self.ffn_chunks != chunks {
            self.cache.clear();
            self.ffn_chunks = chunks;
        }
    }

    /// The chunks the attention of the compiled shape (`batch`, `seq`) is tiled into, if it is
    /// cached.
    pub fn attention_chunks(&self, batch: usize, seq: usize) -> Option<u32> {
        self.tiling(batch, seq).map(|t| t.attention)
    }

    /// How the compiled shape (`batch`, `seq`) is tiled, if it is cached.
    pub fn tiling(&self, batch: usize, seq: usize) -> Option<Tiling> {
        self.cache.get(&(batch, seq)).map(|c| c.tiling)
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

    /// Lets budgeted compiles recompute activations (`true`, the default) or only swap them
    /// (to compare the two in one run; shapes compiled before are dropped).
    pub fn set_recompute(&mut self, on: bool) {
        if self.recompute != on {
            self.cache.clear();
            self.recompute = on;
        }
    }

    /// Takes the planner's rates in budgeted compiles from `rates` (default: measured on the
    /// backend once per runtime; shapes compiled before are dropped).
    pub fn set_rates(&mut self, rates: tensormem::Rates) {
        if self.rates != rates {
            self.cache.clear();
            self.rates = rates;
        }
    }

    /// Puts budgeted compiles' copies on the transfer lane (`true`, the default) or on the
    /// compute queue (to measure what the lane gains; shapes compiled before are dropped).
    pub fn set_transfer_lane(&mut self, on: bool) {
        if self.transfer_lane != on {
            self.cache.clear();
            self.transfer_lane = on;
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
            let (graph, mut model, tiling) = self.compile_shape(batch, seq)?;
            graph.builder.upload_weights(&mut model, &self.weights)?;
            self.cache.insert(
                key,
                Compiled {
                    graph,
                    model,
                    tiling,
                    last_use: 0,
                },
            );
        }
        let entry = self.cache.get_mut(&key).ok_or_else(|| {
            Error::invariant("the shape cache keeps an entry just inserted", "lost")
        })?;
        entry.last_use = self.clock;
        Ok(&mut entry.model)
    }

    /// Uploads a tokenized batch into its shape's model (compiling it if needed).
    ///
    /// # Errors
    /// [`tensormem::ArgumentError::OutOfRange`] for a token, type or position id outside its table
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
    /// [`tensormem::ArgumentError::Invalid`] when that shape was never set up; runtime errors.
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
    /// [`tensormem::ArgumentError::Zero`] for an empty list; tokenizer, graph and runtime errors.
    pub fn embed<S: AsRef<str>>(&mut self, sentences: &[S]) -> Result<Embeddings> {
        let tokens = self.tokenizer.encode_batch(sentences)?;
        self.set_tokens(&tokens)?;
        self.run(tokens.batch, tokens.seq)?;
        let vectors = self.read_embeddings(tokens.batch, tokens.seq)?;
        Ok(Embeddings { vectors, tokens })
    }

    fn entry_mut(&mut self, batch: usize, seq: usize) -> Result<&mut Compiled> {
        self.cache.get_mut(&(batch, seq)).ok_or_else(|| {
            Error::from(tensormem::ArgumentError::invalid_value(
                "minilm shape",
                format!("batch {batch} x seq {seq}"),
                "a shape compiled before (set tokens of that shape first)",
            ))
        })
    }

    /// The compiled model of shape (`batch`, `seq`), if it is cached.
    pub fn cached_model(&self, batch: usize, seq: usize) -> Option<&Model> {
        self.cache.get(&(batch, seq)).map(|c| &c.model)
    }
}

#[cfg(test)]
mod tests;
