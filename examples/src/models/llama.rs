//! A Llama-architecture decoder over the paged KV cache (`generate`): RMSNorm, rotary position
//! embeddings, grouped-query attention, a SwiGLU MLP, tied or untied embeddings, loaded from a
//! Hugging Face–layout directory (`config.json`, `model.safetensors` or shards with their index,
//! `tokenizer.json`).
//!
//! * [`config`] reads and checks `config.json`, refusing by name what it cannot run.
//! * [`weights`] maps the safetensors files and uploads the weights (f32, f16 or int8).
//! * [`forward`] is one step over a batch of chunks, every op a standard runtime op; keys and
//!   values go to the [`KvCache`](tensormem::kv::KvCache) with [`tensormem::Op::KvWrite`] and are
//!   read by [`tensormem::Op::PagedAttention`].
//! * [`engine`] batches requests continuously (chunked prefill, decode, preemption);
//!   [`sampler`] picks tokens.

pub mod config;
pub mod engine;
pub mod forward;
pub mod report;
pub mod sampler;
pub mod serve;
pub mod synthetic;
pub mod weights;

use std::path::Path;

use tensormem::kv::{KvDType, KvGeometry};
use tensormem::{Backend, Error, Result, Runtime, WeightFormat};
use tokenizers::Tokenizer;

pub use config::LlamaConfig;
pub use engine::{Engine, EngineConfig, EngineStats, Event, Finish, Request};
pub use forward::{Chunk, Decoder};
pub use sampler::{Sampler, Sampling};
pub use weights::LlamaWeights;

/// A model directory loaded on a runtime: the decoder and its tokenizer.
pub struct Llama {
    /// Config and device weights.
    pub decoder: Decoder,
    /// The checkpoint's tokenizer.
    pub tokenizer: Tokenizer,
}

impl Llama {
    /// Loads `dir` onto `rt` with matrices in `format`.
    ///
    /// # Errors
    /// A missing or malformed `config.json`, `tokenizer.json` or weight file, an unsupported
    /// config (named), device errors.
    pub fn load(rt: &Runtime, dir: &Path, format: WeightFormat) -> Result<Self> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::Io {
            path: config_path.display().to_string(),
            source: e,
        })?;
        let cfg = LlamaConfig::from_json(&text, &config_path.display().to_string())?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| Error::Malformed {
            source_name: tok_path.display().to_string(),
            line: 0,
            message: format!("tokenizer: {e}"),
        })?;
        let weights = LlamaWeights::load(rt, dir, &cfg, format)?;
        Ok(Llama {
            decoder: Decoder {
                rt: rt.clone(),
                cfg,
                weights,
                replay: None,
            },
            tokenizer,
        })
    }

    /// The KV geometry of this model with `dtype` elements and `block_tokens` per block (0: the
    /// device's default).
    ///
    /// # Errors
    /// A geometry the cache refuses.
    pub fn kv_geometry(&self, dtype: KvDType, block_tokens: u32) -> Result<KvGeometry> {
        let c = &self.decoder.cfg;
        let (layers, heads, hd) = (
            c.num_hidden_layers as u32,
            c.kv_heads() as u32,
            c.head_dim() as u32,
        );
        let block = if block_tokens == 0 {
            let caps = self.decoder.rt.front().capabilities();
            KvGeometry::default_block_tokens(
                layers,
                heads,
                hd,
                dtype,
                caps.binding_align.max(caps.copy_align),
                caps.max_block_size,
            )
        } else {
            block_tokens
        };
        Ok(KvGeometry::new(
            layers,
            heads,
            hd,
            dtype,
            block,
            c.max_position_embeddings as u32,
        )?)
    }

    /// Token ids of `text` (special tokens as the tokenizer's post-processor adds them: BOS).
    ///
    /// # Errors
    /// The tokenizer's failure on the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| Error::Malformed {
                source_name: "tokenizer.json".into(),
                line: 0,
                message: format!("tokenizing {text:?}: {e}"),
            })?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens skipped).
    ///
    /// # Errors
    /// The tokenizer's failure on the ids.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| Error::Malformed {
                source_name: "tokenizer.json".into(),
                line: 0,
                message: format!("decoding {ids:?}: {e}"),
            })
    }
}
