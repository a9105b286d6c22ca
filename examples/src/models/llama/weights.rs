//! A Llama checkpoint's weights on the device: read from `model.safetensors` or the shards its
//! `model.safetensors.index.json` lists (each file memory-mapped), converted to the requested
//! format (f32, f16, int8; norms stay f32), uploaded once as runtime tensors.

use std::borrow::Cow;
use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
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
    #[cfg(not(target_arch = "wasm32"))]
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
        for name in names {
            if name.contains('/') || name.contains("..") {
                return Err(Error::Malformed {
                    source_name: index.display().to_string(),
                    line: 0,
                    message: format!("shard {name:?} is outside the model directory"),
                });
            }
            files.push(WeightFile::open(&dir.join(&name))?);
        }
        Ok(Files::new(files))
    }

    fn new(files: Vec<WeightFile>) -> Self {
        let mut by_name = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for t in f.names() {
                by_name.insert(t.to_string(), i);
            }
        }
        Files { files, by_name }
    }

    /// Refuses a tensor that is not part of a Llama-layout decoder (a checkpoint of another
    /// layout), naming it and `source`.
    fn check_names(&self, source: &str) -> Result<()> {
        let known = |n: &str| {
            n == "lm_head.weight"
                || n.starts_with("model.layers.")
                || n == "model.embed_tokens.weight"
                || n == "model.norm.weight"
                || n.ends_with(".rotary_emb.inv_freq")
        };
        match self.by_name.keys().find(|n| !known(n)) {
            Some(extra) => Err(Error::Malformed {
                source_name: source.to_string(),
                line: 0,
                message: format!("tensor '{extra}' is not part of a Llama-layout decoder"),
            }),
            None => Ok(()),
        }
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
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(rt: &Runtime, dir: &Path, cfg: &LlamaConfig, format: WeightFormat) -> Result<Self> {
        let files = Files::open(dir)?;
        files.check_names(&dir.display().to_string())?;
        let mut loader = Loader::new(rt, &files, format);
        let uploaded = (|| {
            for item in items(cfg) {
                for u in loader.convert(&item)? {
                    let t = rt.alloc(u.dtype, &u.shape, &u.key)?;
                    let sent = rt.upload(&t, &u.bytes);
                    u.release();
                    loader.hold(u.key, t, sent)?;
                }
            }
            Ok(())
        })();
        loader.finish(uploaded, cfg)
    }

    /// [`LlamaWeights::load`] from one safetensors file already in memory, without blocking
    /// (every target; the browser's form).
    ///
    /// # Errors
    /// As [`LlamaWeights::load`].
    pub async fn load_async(
        rt: &Runtime,
        file: WeightFile,
        cfg: &LlamaConfig,
        format: WeightFormat,
    ) -> Result<Self> {
        let files = Files::new(vec![file]);
        files.check_names(&files.files[0].path().display().to_string())?;
        let mut loader = Loader::new(rt, &files, format);
        let uploaded = async {
            for item in items(cfg) {
                for u in loader.convert(&item)? {
                    let t = rt.alloc(u.dtype, &u.shape, &u.key)?;
                    let sent = rt.upload_async(&t, &u.bytes).await;
                    u.release();
                    loader.hold(u.key, t, sent)?;
                }
            }
            Ok(())
        }
        .await;
        loader.finish(uploaded, cfg)
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

/// One tensor to upload: its key, element type, shape and bytes (borrowed from the mapped file
/// when stored as uploaded, so nothing is copied, and its pages are dropped once uploaded).
struct Upload<'f> {
    key: String,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Cow<'f, [u8]>,
    /// The file that lent `bytes`, when borrowed.
    lender: Option<&'f WeightFile>,
}

impl Upload<'_> {
    /// Drops the uploaded bytes' pages from the process when they were borrowed from a mapping.
    fn release(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        if let (Some(file), Cow::Borrowed(b)) = (self.lender, &self.bytes) {
            file.release_pages(b);
        }
        // A browser's file is fetched into memory: nothing is mapped.
        #[cfg(target_arch = "wasm32")]
        let _ = self.lender;
    }
}

/// One item of the checkpoint: a vector (norm weights) or a matrix (with its scales and bias).
enum Item {
    Vector(String, usize),
    Matrix(MatrixSpec),
}

/// Every item of a checkpoint of `cfg`, vectors first.
fn items(cfg: &LlamaConfig) -> Vec<Item> {
    let (mats, vecs) = specs(cfg);
    let vecs = vecs.into_iter().map(|(n, len)| Item::Vector(n, len));
    vecs.chain(mats.into_iter().map(Item::Matrix)).collect()
}

impl<'a> Loader<'a> {
    fn new(rt: &'a Runtime, files: &'a Files, format: WeightFormat) -> Self {
        Loader {
            rt,
            files,
            format,
            bytes: 0,
            held: HashMap::new(),
        }
    }

    /// Keeps the tensor `key` once its upload was `sent`; frees it when the upload failed.
    fn hold<T>(&mut self, key: String, t: Tensor, sent: Result<T>) -> Result<()> {
        if let Err(e) = sent {
            let _ = self.rt.free(t);
            return Err(e);
        }
        self.bytes += t.size();
        self.held.insert(key, t);
        Ok(())
    }

    /// The uploads of `item`, converted to the loader's format.
    fn convert(&self, item: &Item) -> Result<Vec<Upload<'a>>> {
        let vector = |name: &str, len: usize| -> Result<Upload> {
            let values = self.files.file(name)?.f32_values(name, &[len])?;
            Ok(Upload {
                key: name.to_string(),
                dtype: DType::F32,
                shape: vec![len],
                bytes: Cow::Owned(bytemuck::cast_slice(&values).to_vec()),
                lender: None,
            })
        };
        let m = match item {
            Item::Vector(name, len) => return Ok(vec![vector(name, *len)?]),
            Item::Matrix(m) => m,
        };
        let file: &'a WeightFile = self.files.file(&m.name)?;
        let w = file.weight(&m.name, &[m.out, m.inp], self.format)?;
        let dtype = self.format.dtype();
        let mut out = vec![Upload {
            key: m.name.clone(),
            dtype,
            shape: vec![w.bytes.len() / dtype.size() as usize],
            bytes: w.bytes,
            lender: Some(file),
        }];
        if let Some(s) = w.scales {
            out.push(Upload {
                key: format!("{}{SCALES}", m.name),
                dtype: DType::F32,
                shape: vec![s.len() / 4],
                bytes: s,
                lender: Some(file),
            });
        }
        if let Some(b) = m.bias.as_ref().filter(|b| self.files.has(b)) {
            out.push(vector(b, m.out)?);
        }
        Ok(out)
    }

    /// The weights once every upload went (`uploaded`), or, on its error, every tensor freed.
    fn finish(mut self, uploaded: Result<()>, cfg: &LlamaConfig) -> Result<LlamaWeights> {
        if let Err(e) = uploaded {
            for (_, t) in self.held.drain() {
                let _ = self.rt.free(t);
            }
            return Err(e);
        }
        self.assemble(cfg)
    }

    /// Builds the weights from the uploaded tensors (all present: every upload succeeded).
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
