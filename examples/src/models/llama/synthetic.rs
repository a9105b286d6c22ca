//! Llama checkpoints with deterministic random weights, written in Hugging Face layout: the
//! command-line tests and the decode benchmark load them like any model directory. (The numerical
//! reference tests use `scripts/llama_reference.py`'s checkpoint instead, made and checked by
//! code that shares nothing with the runtime.)

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;
use tensormem::{Error, Result};

/// The sizes of a synthetic checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct Synthetic {
    /// Residual width.
    pub hidden: usize,
    /// MLP width.
    pub intermediate: usize,
    /// Layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Vocabulary (word `w{i}` is token `i + 3`; 0, 1, 2 are `<s>`, `</s>`, `<unk>`).
    pub vocab: usize,
    /// Context length.
    pub context: usize,
    /// Tie the output projection to the embeddings.
    pub tied: bool,
}

impl Synthetic {
    /// SmolLM2-135M's shape (30 layers, 576 wide, 9 query and 3 KV heads of 64, vocab 49152).
    pub const SMOLLM2_135M: Synthetic = Synthetic {
        hidden: 576,
        intermediate: 1536,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        vocab: 49152,
        context: 8192,
        tied: true,
    };

    /// A model small enough for command-line tests.
    pub const TINY: Synthetic = Synthetic {
        hidden: 32,
        intermediate: 64,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: 64,
        context: 128,
        tied: false,
    };

    /// Writes `config.json`, `model.safetensors` and `tokenizer.json` into `dir`.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be written.
    pub fn write(&self, dir: &Path, seed: u64) -> Result<()> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |e: std::io::Error| Error::Io { path, source: e }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let config = json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": self.hidden, "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads, "vocab_size": self.vocab,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "max_position_embeddings": self.context, "hidden_act": "silu",
            "tie_word_embeddings": self.tied, "bos_token_id": 0, "eos_token_id": 1,
        });
        let p = dir.join("config.json");
        std::fs::write(&p, format!("{config:#}")).map_err(io(&p))?;
        let p = dir.join("tokenizer.json");
        std::fs::write(&p, self.tokenizer().to_string()).map_err(io(&p))?;
        let tensors = self.tensors(seed);
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(name, shape, data)| {
                let view = TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(data));
                view.map(|v| (name.clone(), v))
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Malformed {
                source_name: "synthetic tensor".into(),
                line: 0,
                message: e.to_string(),
            })?;
        let p = dir.join("model.safetensors");
        safetensors::serialize_to_file(views, None, &p).map_err(|e| Error::Io {
            path: p.display().to_string(),
            source: std::io::Error::other(e),
        })
    }

    fn tensors(&self, seed: u64) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let mut state = seed ^ 0x2545_f491_4f6c_dd1d;
        let mut normal = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    // Sum of four uniforms: close enough to normal for weights.
                    let mut s = 0f32;
                    for _ in 0..4 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        s += (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    }
                    s * 1.732 * scale
                })
                .collect()
        };
        let (h, i) = (self.hidden, self.intermediate);
        let hd = h / self.heads;
        let (q, kv) = (self.heads * hd, self.kv_heads * hd);
        let mut t = Vec::new();
        let mut mat = |name: String, out: usize, inp: usize, gain: f32| {
            let w = normal(out * inp, gain / (inp as f32).sqrt());
            t.push((name, vec![out, inp], w));
        };
        mat(
            "model.embed_tokens.weight".into(),
            self.vocab,
            h,
            (h as f32).sqrt(),
        );
        for l in 0..self.layers {
            let p = format!("model.layers.{l}");
            mat(format!("{p}.self_attn.q_proj.weight"), q, h, 2.0);
            mat(format!("{p}.self_attn.k_proj.weight"), kv, h, 2.0);
            mat(format!("{p}.self_attn.v_proj.weight"), kv, h, 1.0);
            mat(format!("{p}.self_attn.o_proj.weight"), h, q, 1.0);
            mat(format!("{p}.mlp.gate_proj.weight"), i, h, 1.0);
            mat(format!("{p}.mlp.up_proj.weight"), i, h, 1.0);
            mat(format!("{p}.mlp.down_proj.weight"), h, i, 1.0);
        }
        if !self.tied {
            mat("lm_head.weight".into(), self.vocab, h, 4.0);
        }
        for l in 0..self.layers {
            for n in ["input_layernorm", "post_attention_layernorm"] {
                t.push((
                    format!("model.layers.{l}.{n}.weight"),
                    vec![h],
                    vec![1.0; h],
                ));
            }
        }
        t.push(("model.norm.weight".into(), vec![h], vec![1.0; h]));
        t
    }

    fn tokenizer(&self) -> serde_json::Value {
        let special = ["<s>", "</s>", "<unk>"];
        let mut vocab = serde_json::Map::new();
        for (i, s) in special.iter().enumerate() {
            vocab.insert((*s).into(), json!(i));
        }
        for i in special.len()..self.vocab {
            vocab.insert(format!("w{}", i - special.len()), json!(i));
        }
        let added: Vec<_> = special
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                                 "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let bos = json!({"SpecialToken": {"id": "<s>", "type_id": 0}});
        json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": {"type": "TemplateProcessing",
                "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        })
    }
}
