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
        let mut loader = Loader {
            rt,
            files: &files,
            format,
            bytes: 0,
            held: HashMap::new(),
        };
        // Every tensor is uploaded first; on any error all of them are freed.
        if let Err(e) = loader.upload_all(cfg) {
            for (_, t) in loader.held.drain() {
                let _ = rt.free(t);
            }
            return Err(e);
        }
        loader.assemble(cfg)
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

/// What `load` needs of a matrix: its name, rows, columns, and whether a bias may follow.
struct MatrixSpec {
    name: String,
    out: usize,
    inp: usize,
    bias: Option<String>,
}

/// The matrices and vectors of a checkpoint of `cfg`, in file-name order of use.
fn specs(cfg: &LlamaConfig) -> (Vec<MatrixSpec>, Vec<(String, usize)>) {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let kv = cfg.kv_heads() * cfg.head_dim();
    let qd = cfg.num_attention_heads * cfg.head_dim();
    let m = |name: String, out, inp, bias: Option<String>| MatrixSpec {
        name,
        out,
        inp,
        bias,
    };
    let mut mats = vec![m(
        "model.embed_tokens.weight".into(),
        cfg.vocab_size,
        h,
        None,
    )];
    let mut vecs = vec![("model.norm.weight".to_string(), h)];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let attn = |n: &str, out, inp, bias: bool| {
            let b = bias.then(|| format!("{p}.self_attn.{n}_proj.bias"));
            m(format!("{p}.self_attn.{n}_proj.weight"), out, inp, b)
        };
        mats.push(attn("q", qd, h, true));
        mats.push(attn("k", kv, h, true));
        mats.push(attn("v", kv, h, true));
        mats.push(attn("o", h, qd, false));
        for (n, out, inp) in [("gate", i, h), ("up", i, h), ("down", h, i)] {
            mats.push(m(format!("{p}.mlp.{n}_proj.weight"), out, inp, None));
        }
        vecs.push((format!("{p}.input_layernorm.weight"), h));
        vecs.push((format!("{p}.post_attention_layernorm.weight"), h));
    }
    if !cfg.tie_word_embeddings {
        mats.push(m("lm_head.weight".into(), cfg.vocab_size, h, None));
    }
    (mats, vecs)
}

/// Suffix of the key under which a matrix's int8 scales are held.
const SCALES: &str = "#scales";

struct Loader<'a> {
    rt: &'a Runtime,
    files: &'a Files,
    format: WeightFormat,
    bytes: u64,
    /// Every uploaded tensor by name (scales under `name#scales`).
    held: HashMap<String, Tensor>,
}

impl Loader<'_> {
    fn upload(&mut self, key: String, dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<()> {
        let t = self.rt.alloc(dtype, shape, &key)?;
        if let Err(e) = self.rt.upload(&t, bytes) {
            let _ = self.rt.free(t);
            return Err(e);
        }
        self.bytes += t.size();
        self.held.insert(key, t);
        Ok(())
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<()> {
        let values = self.files.file(name)?.f32_values(name, &[len])?;
        self.upload(
            name.to_string(),
            DType::F32,
            &[len],
            bytemuck::cast_slice(&values),
        )
    }

    fn upload_all(&mut self, cfg: &LlamaConfig) -> Result<()> {
        let (mats, vecs) = specs(cfg);
        for (name, len) in &vecs {
            self.vector(name, *len)?;
        }
        for m in &mats {
            let w = self
                .files
                .file(&m.name)?
                .weight(&m.name, &[m.out, m.inp], self.format)?;
            let dtype = self.format.dtype();
            let elems = w.bytes.len() / dtype.size() as usize;
            self.upload(m.name.clone(), dtype, &[elems], &w.bytes)?;
            if let Some(s) = &w.scales {
                self.upload(format!("{}{SCALES}", m.name), DType::F32, &[s.len() / 4], s)?;
            }
            if let Some(b) = m.bias.as_ref().filter(|b| self.files.has(b)) {
                self.vector(b, m.out)?;
            }
        }
        Ok(())
    }

    /// Builds the weights from the uploaded tensors (all present: `upload_all` succeeded).
    fn assemble(mut self, cfg: &LlamaConfig) -> Result<LlamaWeights> {
        let mut take = |key: &str| {
            self.held
                .remove(key)
                .ok_or_else(|| Error::invariant("every tensor was uploaded", key.to_string()))
        };
        let (mats, _) = specs(cfg);
        let mut linears = HashMap::new();
        for m in mats {
            let scales = take(&format!("{}{SCALES}", m.name)).ok();
            let bias = m.bias.as_deref().and_then(|b| take(b).ok());
            let w = take(&m.name)?;
            let l = Linear {
                w,
                scales,
                bias,
                out: m.out,
                inp: m.inp,
                format: self.format,
            };
            linears.insert(m.name, l);
        }
        let mut lin = |key: String| {
            linears
                .remove(&key)
                .ok_or_else(|| Error::invariant("every matrix was uploaded", key))
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            layers.push(Layer {
                attn_norm: take(&format!("{p}.input_layernorm.weight"))?,
                q: lin(format!("{p}.self_attn.q_proj.weight"))?,
                k: lin(format!("{p}.self_attn.k_proj.weight"))?,
                v: lin(format!("{p}.self_attn.v_proj.weight"))?,
                o: lin(format!("{p}.self_attn.o_proj.weight"))?,
                mlp_norm: take(&format!("{p}.post_attention_layernorm.weight"))?,
                gate: lin(format!("{p}.mlp.gate_proj.weight"))?,
                up: lin(format!("{p}.mlp.up_proj.weight"))?,
                down: lin(format!("{p}.mlp.down_proj.weight"))?,
            });
        }
        Ok(LlamaWeights {
            embed: lin("model.embed_tokens.weight".into())?,
            layers,
            norm: take("model.norm.weight")?,
            lm_head: if cfg.tie_word_embeddings {
                None
            } else {
                Some(lin("lm_head.weight".into())?)
            },
            bytes: self.bytes,
        })
    }
}
