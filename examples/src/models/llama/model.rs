//! A model directory on a runtime: the decoder (config and device weights) and its tokenizer,
//! loaded from files (native) or from their contents (every target; the browser's form), with
//! the KV geometry it needs and text to tokens and back.

#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use tensormem::kv::{KvDType, KvGeometry};
use tensormem::{Backend, Error, Result, Runtime, WeightFormat};
use tokenizers::Tokenizer;

use super::config::LlamaConfig;
use super::forward::Decoder;
use super::weights::LlamaWeights;
use crate::models::weights::WeightFile;

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
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(rt: &Runtime, dir: &Path, format: WeightFormat) -> Result<Self> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| Error::Io {
            path: config_path.display().to_string(),
            source: e,
        })?;
        let cfg = LlamaConfig::from_json(&text, &config_path.display().to_string())?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&tok_path)
            .map_err(|e| tokenizer_error(&tok_path.display().to_string(), e))?;
        let weights = LlamaWeights::load(rt, dir, &cfg, format)?;
        Ok(Llama::new(rt, cfg, weights, tokenizer))
    }

    /// [`Llama::load`] from the three files' contents, without blocking (every target; the
    /// browser's form): `config.json`'s text, `tokenizer.json`'s bytes and the weights.
    ///
    /// # Errors
    /// As [`Llama::load`].
    pub async fn load_async(
        rt: &Runtime,
        config: &str,
        tokenizer: &[u8],
        weights: WeightFile,
        format: WeightFormat,
    ) -> Result<Self> {
        let cfg = LlamaConfig::from_json(config, "config.json")?;
        let tokenizer =
            Tokenizer::from_bytes(tokenizer).map_err(|e| tokenizer_error("tokenizer.json", e))?;
        let weights = LlamaWeights::load_async(rt, weights, &cfg, format).await?;
        Ok(Llama::new(rt, cfg, weights, tokenizer))
    }

    fn new(rt: &Runtime, cfg: LlamaConfig, weights: LlamaWeights, tokenizer: Tokenizer) -> Self {
        Llama {
            decoder: Decoder {
                rt: rt.clone(),
                cfg,
                weights,
                replay: None,
            },
            tokenizer,
        }
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

fn tokenizer_error(source: &str, e: impl std::fmt::Display) -> Error {
    Error::Malformed {
        source_name: source.to_string(),
        line: 0,
        message: format!("tokenizer: {e}"),
    }
}
