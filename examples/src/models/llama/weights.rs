//! A Llama checkpoint's weights on the device: read from `model.safetensors` or the shards its
//! `model.safetensors.index.json` lists (each file memory-mapped), converted to the requested
//! format (f32, f16, int8; norms stay f32), uploaded once as runtime tensors.

use std::collections::HashMap;
use std::path::Path;

use tensormem::{DType, Error, Result, Runtime, Tensor, WeightFormat};

use super::config::LlamaConfig;
use crate::models::weights::WeightFile;

/// A matrix `[out, in]` (PyTorch layout) on the device, with its int8 scales and bias.
pub struct Linear {
    /// The weight in `format`.
    pub w: Tensor,
    /// Int8 scales.
    pub scales: Option<Tensor>,
    /// Bias `[out]` (Qwen2's attention projections).
    pub bias: Option<Tensor>,
    /// Rows (output features).
    pub out: usize,
    /// Columns (input features).
    pub inp: usize,
    /// Storage format.
    pub format: WeightFormat,
}

/// One decoder layer.
pub struct Layer {
    /// RMSNorm before attention.
    pub attn_norm: Tensor,
    /// Query, key, value and output projections.
    pub q: Linear,
    /// Key projection.
    pub k: Linear,
    /// Value projection.
    pub v: Linear,
    /// Output projection.
    pub o: Linear,
    /// RMSNorm before the MLP.
    pub mlp_norm: Tensor,
    /// MLP gate projection.
    pub gate: Linear,
    /// MLP up projection.
    pub up: Linear,
    /// MLP down projection.
    pub down: Linear,
}

/// Every weight of the model.
pub struct LlamaWeights {
    /// Token embeddings `[vocab, hidden]`.
    pub embed: Linear,
    /// Decoder layers.
    pub layers: Vec<Layer>,
    /// Final RMSNorm.
    pub norm: Tensor,
    /// Output projection; `None` when tied to the embeddings.
    pub lm_head: Option<Linear>,
    /// Device bytes of all of them.
    pub bytes: u64,
}

/// The checkpoint's files, by tensor name.
struct Files {
    files: Vec<WeightFile>,
    by_name: HashMap<String, usize>,
}

impl Files {
    fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let names: Vec<String> = if index.is_file() {
            let text = std::fs::read_to_string(&index).map_err(|e| Error::Io {
                path: index.display().to_string(),
                source: e,
            })?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Malformed {
                    source_name: index.display().to_string(),
                    line: 0,
                    message: format!("index: {e}"),
                })?;
            let mut shards: Vec<String> = v["weight_map"]
                .as_object()
                .ok_or_else(|| Error::Malformed {
                    source_name: index.display().to_string(),
                    line: 0,
                    message: "no weight_map object".into(),
                })?
                .values()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            shards.sort();
            shards.dedup();
            shards
        } else {
            vec!["model.safetensors".to_string()]
        };
        let mut files = Vec::new();
        let mut by_name = HashMap::new();
        for name in names {
            if name.contains('/') || name.contains("..") {
                return Err(Error::Malformed {
                    source_name: index.display().to_string(),
                    line: 0,
                    message: format!("shard {name:?} is outside the model directory"),
                });
            }
            let f = WeightFile::open(&dir.join(&name))?;
            for t in f.names() {
                by_name.insert(t.to_string(), files.len());
            }
            files.push(f);
        }
        Ok(Files { files, by_name })
    }

    fn file(&self, name: &str) -> Result<&WeightFile> {
        self.by_name
            .get(name)
            .map(|&i| &self.files[i])
            .ok_or_else(|| Error::Malformed {
                source_name: self
                    .files
                    .first()
                    .map_or(String::new(), |f| f.path().display().to_string()),
                line: 0,
                message: format!("tensor '{name}' is missing"),
            })
    }

    fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

impl LlamaWeights {
    /// Loads every weight of `cfg` from `dir` onto `rt`, matrices in `format`. Tensors the
    /// architecture does not use are refused by name (a checkpoint of another layout).
    ///
    /// # Errors
    /// A missing or malformed file or tensor, a tensor of the wrong shape, an unexpected tensor,
    /// device errors. Nothing stays allocated on error.
    pub fn load(rt: &Runtime, dir: &Path, cfg: &LlamaConfig, format: WeightFormat) -> Result<Self> {
        let files = Files::open(dir)?;
        let mut loader = Loader {
            rt,
            files: &files,
            format,
            bytes: 0,
        };
        let (h, kv) = (cfg.hidden_size, cfg.kv_heads() * cfg.head_dim());
        let qd = cfg.num_attention_heads * cfg.head_dim();
        let embed = loader.linear("model.embed_tokens.weight", cfg.vocab_size, h, None)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let bias = |n: &str| Some(format!("{p}.self_attn.{n}_proj.bias"));
            layers.push(Layer {
                attn_norm: loader.vector(&format!("{p}.input_layernorm.weight"), h)?,
                q: loader.linear(&format!("{p}.self_attn.q_proj.weight"), qd, h, bias("q"))?,
                k: loader.linear(&format!("{p}.self_attn.k_proj.weight"), kv, h, bias("k"))?,
                v: loader.linear(&format!("{p}.self_attn.v_proj.weight"), kv, h, bias("v"))?,
                o: loader.linear(&format!("{p}.self_attn.o_proj.weight"), h, qd, None)?,
                mlp_norm: loader.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
                gate: loader.linear(
                    &format!("{p}.mlp.gate_proj.weight"),
                    cfg.intermediate_size,
                    h,
                    None,
                )?,
                up: loader.linear(
                    &format!("{p}.mlp.up_proj.weight"),
                    cfg.intermediate_size,
                    h,
                    None,
                )?,
                down: loader.linear(
                    &format!("{p}.mlp.down_proj.weight"),
                    h,
                    cfg.intermediate_size,
                    None,
                )?,
            });
        }
        let norm = loader.vector("model.norm.weight", h)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(loader.linear("lm_head.weight", cfg.vocab_size, h, None)?)
        };
        let known = |n: &str| {
            n == "lm_head.weight"
                || n.starts_with("model.layers.")
                || n == "model.embed_tokens.weight"
                || n == "model.norm.weight"
                || n.ends_with(".rotary_emb.inv_freq")
        };
        if let Some(extra) = files.by_name.keys().find(|n| !known(n)) {
            return Err(Error::Malformed {
                source_name: dir.display().to_string(),
                line: 0,
                message: format!("tensor '{extra}' is not part of a Llama-layout decoder"),
            });
        }
        Ok(LlamaWeights {
            embed,
            layers,
            norm,
            lm_head,
            bytes: loader.bytes,
        })
    }

    /// Frees every tensor.
    ///
    /// # Errors
    /// The runtime's free errors (the first; every tensor is freed regardless).
    pub fn release(self, rt: &Runtime) -> Result<()> {
        let mut tensors = vec![self.norm];
        let linear = |l: Linear, out: &mut Vec<Tensor>| {
            out.push(l.w);
            out.extend(l.scales);
            out.extend(l.bias);
        };
        linear(self.embed, &mut tensors);
        if let Some(l) = self.lm_head {
            linear(l, &mut tensors);
        }
        for l in self.layers {
            tensors.push(l.attn_norm);
            tensors.push(l.mlp_norm);
            for m in [l.q, l.k, l.v, l.o, l.gate, l.up, l.down] {
                linear(m, &mut tensors);
            }
        }
        let mut result = Ok(());
        for t in tensors {
            if let Err(e) = rt.free(t) {
                result = result.and(Err(e));
            }
        }
        result
    }
}

struct Loader<'a> {
    rt: &'a Runtime,
    files: &'a Files,
    format: WeightFormat,
    bytes: u64,
}

impl Loader<'_> {
    fn upload(
        &mut self,
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
        label: &str,
    ) -> Result<Tensor> {
        let t = self.rt.alloc(dtype, shape, label)?;
        if let Err(e) = self.rt.upload(&t, bytes) {
            let _ = self.rt.free(t);
            return Err(e);
        }
        self.bytes += t.size();
        Ok(t)
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor> {
        let values = self.files.file(name)?.f32_values(name, &[len])?;
        self.upload(DType::F32, &[len], bytemuck::cast_slice(&values), name)
    }

    fn linear(
        &mut self,
        name: &str,
        out: usize,
        inp: usize,
        bias: Option<String>,
    ) -> Result<Linear> {
        let file = self.files.file(name)?;
        let w = file.weight(name, &[out, inp], self.format)?;
        let dtype = self.format.dtype();
        let elems = w.bytes.len() as u64 / dtype.size();
        let w_t = self.upload(dtype, &[elems as usize], &w.bytes, name)?;
        let scales = match &w.scales {
            Some(s) => Some(self.upload(DType::F32, &[s.len() / 4], s, name)?),
            None => None,
        };
        let bias = match bias.filter(|b| self.files.has(b)) {
            Some(b) => Some(self.vector(&b, out)?),
            None => None,
        };
        Ok(Linear {
            w: w_t,
            scales,
            bias,
            out,
            inp,
            format: self.format,
        })
    }
}
