//! A Llama-architecture `config.json`: the keys the decoder reads, checked, and every key that
//! would change the architecture refused by name (rope scaling, another activation, sliding
//! windows, biases on the MLP), so a checkpoint this decoder cannot run exactly fails at load
//! instead of generating plausible nonsense.

use serde::Deserialize;
use serde_json::Value;
use tensormem::{Error, Result};

/// The fields of a Hugging Face `LlamaConfig` (or a Qwen2 / Mistral config of the same layout)
/// that the decoder uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LlamaConfig {
    /// Residual stream width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Vocabulary.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f32,
    /// Rotary base.
    #[serde(default = "default_theta")]
    pub rope_theta: f32,
    /// Context length.
    #[serde(default = "default_ctx")]
    pub max_position_embeddings: usize,
    /// `lm_head` shares `embed_tokens`.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// End-of-sequence token id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
    /// Beginning-of-sequence token id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
}

fn default_eps() -> f32 {
    1e-6
}
fn default_theta() -> f32 {
    10_000.0
}
fn default_ctx() -> usize {
    2048
}

impl LlamaConfig {
    /// Parses and checks a `config.json`; `source` names it in errors.
    ///
    /// # Errors
    /// [`Error::Malformed`] for bad JSON, a missing key, a size of zero, inconsistent head
    /// counts, or a key that changes the architecture (named in the message).
    pub fn from_json(text: &str, source: &str) -> Result<Self> {
        let malformed = |message: String| Error::Malformed {
            source_name: source.to_string(),
            line: 0,
            message,
        };
        let raw: Value =
            serde_json::from_str(text).map_err(|e| malformed(format!("config: {e}")))?;
        refuse_unsupported(&raw).map_err(malformed)?;
        let cfg: LlamaConfig =
            serde_json::from_value(raw).map_err(|e| malformed(format!("config: {e}")))?;
        cfg.check().map_err(malformed)?;
        Ok(cfg)
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The end-of-sequence ids (one or a list in the config).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(Value::Number(n)) => n.as_u64().map(|v| v as u32).into_iter().collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect(),
            _ => Vec::new(),
        }
    }

    fn check(&self) -> std::result::Result<(), String> {
        for (name, v) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("head_dim", self.head_dim()),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if v == 0 {
                return Err(format!("{name} is 0"));
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!(
                "head_dim {} is odd (rotary pairs halves)",
                self.head_dim()
            ));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(format!(
                "rms_norm_eps {} is not a positive number",
                self.rms_norm_eps
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(format!(
                "rope_theta {} is not a number above 1",
                self.rope_theta
            ));
        }
        let total = self.max_position_embeddings as u64;
        if total > u64::from(u32::MAX) {
            return Err(format!("max_position_embeddings {total} is past u32"));
        }
        Ok(())
    }
}

/// Refuses, by name, the keys whose values change the architecture away from what the decoder
/// computes.
fn refuse_unsupported(raw: &Value) -> std::result::Result<(), String> {
    let get = |k: &str| raw.get(k).filter(|v| !v.is_null());
    if let Some(arch) = raw.get("architectures").and_then(Value::as_array) {
        let ok = ["LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"];
        if let Some(a) = arch
            .iter()
            .filter_map(Value::as_str)
            .find(|a| !ok.contains(a))
        {
            return Err(format!(
                "architectures: {a} is not supported (Llama-layout decoders: {})",
                ok.join(", ")
            ));
        }
    }
    if let Some(v) = get("rope_scaling") {
        return Err(format!(
            "rope_scaling {v} is not supported (plain rotary only)"
        ));
    }
    if let Some(act) = get("hidden_act").and_then(Value::as_str)
        && act != "silu"
    {
        return Err(format!("hidden_act {act:?} is not supported (silu only)"));
    }
    if get("mlp_bias").and_then(Value::as_bool) == Some(true) {
        return Err("mlp_bias true is not supported".into());
    }
    if get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
        return Err("use_sliding_window true is not supported (full attention only)".into());
    }
    if raw.get("model_type").and_then(Value::as_str) == Some("mistral")
        && get("sliding_window").is_some()
    {
        return Err("sliding_window is not supported (full attention only)".into());
    }
    if let Some(p) = get("pretraining_tp").and_then(Value::as_u64)
        && p != 1
    {
        return Err(format!("pretraining_tp {p} is not supported"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "eos_token_id": [2, 3]}"#;

    #[test]
    fn reads_a_gqa_config() {
        let c = LlamaConfig::from_json(BASE, "config.json").unwrap();
        assert_eq!(
            (c.kv_heads(), c.head_dim(), c.eos_ids()),
            (2, 16, vec![2, 3])
        );
    }

    #[test]
    fn refuses_what_it_cannot_run_by_name() {
        let with = |k: &str, v: &str| {
            let mut raw: Value = serde_json::from_str(BASE).unwrap();
            raw[k] = serde_json::from_str(v).unwrap();
            raw.to_string()
        };
        for (k, v, word) in [
            (
                "rope_scaling",
                r#"{"type": "linear", "factor": 2.0}"#,
                "rope_scaling",
            ),
            ("hidden_act", r#""gelu""#, "hidden_act"),
            ("architectures", r#"["GPT2LMHeadModel"]"#, "GPT2LMHeadModel"),
            ("mlp_bias", "true", "mlp_bias"),
            ("use_sliding_window", "true", "use_sliding_window"),
            ("num_key_value_heads", "3", "num_key_value_heads"),
            ("rms_norm_eps", "0", "rms_norm_eps"),
        ] {
            let e = LlamaConfig::from_json(&with(k, v), "c.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(word), "{k}: {e}");
        }
        assert!(LlamaConfig::from_json("{", "c.json").is_err());
        assert!(LlamaConfig::from_json("{}", "c.json").is_err());
    }
}
