//! `candle-generate`: greedy decoding with candle's Llama (candle-transformers) on the host CPU,
//! the peer `scripts/bench_vs_candle.py` runs beside `generate` on the same checkpoint and the same
//! prompt token ids. Built only with the examples' `candle` feature:
//! `cargo build --release -p tensormem-examples --features candle --bin candle-generate`.
//!
//! It does what a candle user does: weights memory-mapped through `VarBuilder` in the requested
//! dtype, candle's own KV cache (concatenated per step), the prompt in one forward, then one token
//! per forward. It prints the generated ids and the prefill and decode times as JSON; the script
//! measures the process's peak RSS from outside, as it does for `generate`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Llama, LlamaConfig, LlamaEosToks};
use clap::Parser;
use serde_json::json;

/// Greedy decoding with candle's Llama on the CPU (a benchmark peer of `generate`).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Model directory (Hugging Face layout: config.json and model.safetensors).
    #[arg(long, value_name = "DIR")]
    model_dir: PathBuf,
    /// The prompt's token ids, comma-separated (as `generate --json` reports them).
    #[arg(long, value_name = "IDS", value_delimiter = ',', required = true)]
    prompt_ids: Vec<u32>,
    /// Most tokens to generate.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_new_tokens: u32,
    /// Weight and activation dtype.
    #[arg(long, value_name = "f32|f16|bf16", default_value = "f32")]
    dtype: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(doc) => {
            println!("{doc:#}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("candle-generate: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => return Err(format!("--dtype {other}: expected f32, f16 or bf16").into()),
    };
    let device = Device::Cpu;
    let config: LlamaConfig =
        serde_json::from_slice(&std::fs::read(args.model_dir.join("config.json"))?)?;
    let eos: Vec<u32> = match &config.eos_token_id {
        Some(LlamaEosToks::Single(id)) => vec![*id],
        Some(LlamaEosToks::Multiple(ids)) => ids.clone(),
        None => Vec::new(),
    };
    let config = config.into_config(false);
    let weights = args.model_dir.join("model.safetensors");
    let t = Instant::now();
    // SAFETY: the file is mapped read-only and nothing in this process writes it; candle's own
    // examples load checkpoints this way.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], dtype, &device)? };
    let model = Llama::load(vb, &config)?;
    let load_secs = t.elapsed().as_secs_f64();
    let mut cache = Cache::new(true, dtype, &config, &device)?;

    let mut tokens: Vec<u32> = Vec::new();
    let mut input = args.prompt_ids.clone();
    let mut pos = 0;
    let (mut prefill_secs, mut decode_secs) = (0.0, 0.0);
    while tokens.len() < args.max_new_tokens as usize {
        let t = Instant::now();
        let x = Tensor::new(input.as_slice(), &device)?.unsqueeze(0)?;
        let logits = model.forward(&x, pos, &mut cache)?.squeeze(0)?;
        let next = logits.to_dtype(DType::F32)?.argmax(0)?.to_scalar::<u32>()?;
        let secs = t.elapsed().as_secs_f64();
        if pos == 0 {
            prefill_secs = secs;
        } else {
            decode_secs += secs;
        }
        pos += input.len();
        tokens.push(next);
        if eos.contains(&next) {
            break;
        }
        input = vec![next];
    }
    let decode_tokens = tokens.len().saturating_sub(1);
    Ok(json!({
        "tokens": tokens,
        "timings": {
            "load_secs": load_secs,
            "prefill_tokens": args.prompt_ids.len(),
            "prefill_secs": prefill_secs,
            "prefill_tokens_per_s": args.prompt_ids.len() as f64 / prefill_secs,
            "decode_tokens": decode_tokens,
            "decode_secs": decode_secs,
            "decode_tokens_per_s": decode_tokens as f64 / decode_secs.max(f64::MIN_POSITIVE),
        },
    }))
}
