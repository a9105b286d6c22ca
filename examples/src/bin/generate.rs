//! `generate`: text generation with a Llama-architecture decoder over tensormem's paged KV cache,
//! every prompt batched continuously, on any backend. Prints the text as it comes, then the memory
//! report (KV section included) and prefill and decode speed. `generate --help` lists the flags.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use serde_json::json;
use tensormem::kv::{KvCache, KvCacheConfig, KvDType, Preemption};
use tensormem::pool::{ReplayConfig, ReplayPool, SpillConfig, SpillPool};
use tensormem::{ArenaConfig, ArenaPool, Error, Result, Runtime, Tracer};
use tensormem_examples::backend_select;
use tensormem_examples::cli::{self, DeviceArgs, DeviceBudget, EXIT_CODES, WeightChoice, emit};
use tensormem_examples::models::llama::report::GenerateReport;
use tensormem_examples::models::llama::serve::{self, ServeConfig};
use tensormem_examples::models::llama::{
    Engine, EngineConfig, Event, Finish, Llama, Request, Sampling,
};
use tensormem_examples::serving::paged::{Paged, PagedConfig};
use tensormem_examples::serving::report::table;
use tensormem_examples::serving::sim::{SimConfig, simulate};
use tensormem_examples::serving::trace;

/// Generate text with a Llama-architecture decoder (SmolLM2, TinyLlama, Qwen2-style checkpoints
/// in Hugging Face layout) on a tensormem backend, every prompt in one continuously batched run
/// over a paged KV cache.
///
/// The model directory holds `config.json`, `model.safetensors` (or shards with
/// `model.safetensors.index.json`) and `tokenizer.json`. Without --model-dir the SmolLM2-135M
/// cache of `scripts/fetch_smollm2.sh` is used. A config this decoder cannot run exactly (rope
/// scaling, sliding windows, another activation) is refused by name.
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    /// Prompts (each generates independently; all run batched).
    #[arg(value_name = "PROMPT", required_unless_present = "serve")]
    prompts: Vec<String>,
    /// Replay a request trace (Azure format: `TIMESTAMP,ContextTokens,GeneratedTokens`) through
    /// the engine, lengths scaled to the model's context, and report it with the serving
    /// simulator's metrics beside the simulator's own run of the same trace (`tensormem-kv`).
    #[arg(long, value_name = "TRACE.csv", conflicts_with = "prompts")]
    serve: Option<PathBuf>,
    /// With --serve: replay only the first N requests.
    #[arg(long, value_name = "N", default_value_t = 64)]
    requests: usize,
    /// With --serve: simulated milliseconds per step (arrivals are placed in steps).
    #[arg(long, value_name = "MS", default_value_t = 40.0)]
    step_ms: f64,
    /// With --serve: arrivals this many times faster than in the trace.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    rate_scale: f64,
    /// Model directory (Hugging Face layout).
    #[arg(long, value_name = "DIR")]
    model_dir: Option<PathBuf>,
    /// Most tokens to generate per prompt.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_new_tokens: u32,
    /// Device flags.
    #[command(flatten)]
    device: DeviceArgs,
    /// Format of the weight matrices on the device (norms stay f32).
    #[arg(long, value_enum, default_value_t = WeightChoice::F32)]
    weights: WeightChoice,
    /// Element type of the KV cache.
    #[arg(long, value_name = "f32|f16|int8", default_value = "f32", value_parser = parse_kv_dtype)]
    kv_dtype: KvDType,
    /// Device memory the whole run may hold (weights, KV cache, activations), e.g. 300MiB: what
    /// does not fit is spilled to host memory while idle and brought back on its next use
    /// (least recently used first), with identical tokens. Steps then run without replay plans.
    #[arg(long, value_name = "SIZE", value_parser = cli::parse_device_budget)]
    device_budget: Option<DeviceBudget>,
    /// Device memory of the KV cache (e.g. 256MiB); requests beyond it wait or are preempted.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = cli::parse_device_budget)]
    kv_budget: DeviceBudget,
    /// Tokens per KV block (0: the device's default).
    #[arg(long, value_name = "N", default_value_t = 0)]
    block: u32,
    /// Most tokens computed per step (chunked prefill splits longer prompts).
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    step_tokens: u32,
    /// How a request steps aside when the KV budget is full.
    #[arg(long, value_name = "swap|recompute", default_value = "swap", value_parser = parse_preempt)]
    preempt: Preemption,
    /// Sampling temperature (0: greedy).
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, value_name = "K", default_value_t = 0)]
    top_k: usize,
    /// Sample within the smallest set of tokens of probability P (1: all).
    #[arg(long, value_name = "P", default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the sampler (prompt i uses seed + i).
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print one JSON object (tokens, text, report, timings) instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Record every allocation, transfer, tensor use and the KV cache's blocks over the run and
    /// write them as Chrome trace JSON (`tensormem-report` shows the KV cache as its own lane).
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
}

impl Args {
    /// The `--device-budget` in bytes (0 without one; `run` refuses percentages).
    fn device_budget_bytes(&self) -> u64 {
        match self.device_budget {
            Some(DeviceBudget::Bytes(b)) => b,
            _ => 0,
        }
    }
}

fn parse_kv_dtype(s: &str) -> std::result::Result<KvDType, String> {
    KvDType::parse(s).map_err(|e| e.to_string())
}

fn parse_preempt(s: &str) -> std::result::Result<Preemption, String> {
    match s {
        "swap" => Ok(Preemption::Swap),
        "recompute" => Ok(Preemption::Recompute),
        _ => Err(format!("'{s}': swap or recompute")),
    }
}

fn main() -> ExitCode {
    cli::exit("generate", run(&Args::parse()))
}

/// The model directory: the flag, else the SmolLM2 cache.
fn model_dir(args: &Args) -> Result<PathBuf> {
    if let Some(d) = &args.model_dir {
        return Ok(d.clone());
    }
    let cache = std::env::var_os("TENSORMEM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tensormem")))
        .unwrap_or_default()
        .join("smollm2");
    if cache.join("config.json").is_file() {
        return Ok(cache);
    }
    Err(Error::invalid(format!(
        "no --model-dir and no cached model at {} (run scripts/fetch_smollm2.sh)",
        cache.display()
    )))
}

fn run(args: &Args) -> Result<()> {
    let budget = args.kv_budget.bytes("--kv-budget", "a size")?;
    let dir = model_dir(args)?;
    let selection = backend_select::select(args.device.backend, &args.device.select_options())?;
    // Steps' intermediates go through a record-and-replay pool: a shape seen before replays its
    // plan (forward.rs keys each step by its bucketed shape). Under a device budget, a spilling
    // pool instead moves the least recently used idle allocations to host memory.
    let device_budget = DeviceBudget::bytes_only(args.device_budget, "a size")?;
    let mut config = args.device.runtime_config();
    config.device.budget = device_budget.or(config.device.budget);
    let (mut replay, mut spill) = (None, None);
    let rt = Runtime::with_pool(selection.backend.clone(), config, |front, budget| {
        let dynamic = Arc::new(ArenaPool::with_budget(
            front.clone(),
            ArenaConfig::device(),
            budget,
        )?);
        if device_budget.is_some() {
            let pool = Arc::new(SpillPool::new(dynamic, front, SpillConfig::default()));
            spill = Some(pool.clone());
            return Ok(pool);
        }
        let pool = Arc::new(ReplayPool::new(dynamic, ReplayConfig::default()));
        replay = Some(pool.clone());
        Ok(pool)
    })?;
    let format = cli::WeightArgs {
        format: args.weights,
        group: 0,
        weights_file: None,
    }
    .format();
    let tracer = args.trace.as_ref().map(|_| Tracer::new());
    rt.set_tracer(tracer.clone());
    let mut model = Llama::load(&rt, &dir, format)?;
    model.decoder.replay = replay;
    let result = match &args.serve {
        Some(trace) => serve(args, &rt, &model, budget, trace),
        None => generate(
            args,
            &rt,
            &model,
            budget,
            &selection.to_text(),
            spill.as_deref(),
        ),
    };
    let released = model.decoder.weights.release(&rt);
    if let (Some(path), Some(tracer)) = (&args.trace, &tracer) {
        let trace = tracer.snapshot();
        cli::write_file(path, trace.to_chrome_json())?;
        eprintln!(
            "generate: trace of {} events written to {}",
            trace.events.len(),
            path.display()
        );
    }
    result.and(released)
}

/// The KV cache of `model` within `budget` bytes, with the block size, dtype and preemption
/// `args` ask for.
fn kv_cache(args: &Args, rt: &Runtime, model: &Llama, budget: u64) -> Result<KvCache> {
    let geometry = model.kv_geometry(args.kv_dtype, args.block)?;
    KvCache::new(
        rt,
        KvCacheConfig {
            geometry,
            budget,
            preemption: args.preempt,
        },
    )
}

fn generate(
    args: &Args,
    rt: &Runtime,
    model: &Llama,
    budget: u64,
    backend: &str,
    spill: Option<&SpillPool>,
) -> Result<()> {
    let mut kv = kv_cache(args, rt, model, budget)?;
    let geometry = *kv.geometry();
    let stop = if args.ignore_eos {
        Vec::new()
    } else {
        model.decoder.cfg.eos_ids()
    };
    let prompts: Vec<Vec<u32>> = args
        .prompts
        .iter()
        .map(|p| model.encode(p))
        .collect::<Result<_>>()?;
    let config = EngineConfig {
        step_tokens: args.step_tokens as usize,
        salt: 0,
    };
    let mut engine = Engine::new(&model.decoder, &mut kv, budget, args.preempt, config);
    for (i, prompt) in prompts.iter().enumerate() {
        engine.add(Request {
            prompt: prompt.clone(),
            max_new_tokens: args.max_new_tokens as usize,
            sampling: Sampling {
                temperature: args.temperature,
                top_k: args.top_k,
                top_p: args.top_p,
                seed: args.seed.wrapping_add(i as u64),
            },
            stop: stop.clone(),
        })?;
    }
    let n = prompts.len();
    let mut tokens = vec![Vec::new(); n];
    let mut finish = vec![None; n];
    let mut printed = vec![0usize; n];
    let stream = !args.json;
    if stream {
        print!("{}", args.prompts[0]);
    }
    while !engine.is_idle() {
        for event in engine.step()? {
            match event {
                Event::Token { id, token } => {
                    tokens[id].push(token);
                    if stream && id == 0 {
                        let text = model.decode(&tokens[0])?;
                        if let Some(delta) = text.get(printed[0]..) {
                            print!("{delta}");
                            let _ = std::io::stdout().flush();
                        }
                        printed[0] = text.len();
                    }
                }
                Event::Admitted { .. } => {}
                Event::Finished { id, finish: f } => {
                    finish[id] = Some(f);
                    if stream && id > 0 {
                        println!(
                            "\n[{id}] {}{}",
                            args.prompts[id],
                            model.decode(&tokens[id])?
                        );
                    }
                }
            }
        }
    }
    let report = GenerateReport {
        weight_bytes: model.decoder.weights.bytes,
        kv: engine.cache().stats(),
        block_tokens: geometry.block_tokens,
        kv_dtype: args.kv_dtype.name(),
        engine: engine.stats().clone(),
        device_peak: rt.budget().peak_reserved(),
        replay: model.decoder.replay.as_ref().map(|r| r.replay_stats()),
        spill: spill.map(|s| (args.device_budget_bytes(), s.spill_stats())),
    };
    drop(engine);
    let texts: Vec<String> = tokens
        .iter()
        .map(|t| model.decode(t))
        .collect::<Result<_>>()?;
    if args.json {
        let out: Vec<_> = (0..n)
            .map(|i| {
                json!({
                    "prompt": args.prompts[i],
                    "prompt_ids": prompts[i],
                    "tokens": tokens[i],
                    "text": texts[i],
                    "finish": finish[i].map(finish_name),
                })
            })
            .collect();
        let mut doc = json!({ "backend": backend, "outputs": out });
        let r = report.to_json();
        doc["report"] = r.clone();
        doc["timings"] = r["timings"].clone();
        emit(&format!("{doc:#}\n"));
    } else {
        println!("\n\nbackend: {backend}");
        emit(&report.to_text());
    }
    kv.release()
}

fn serve(args: &Args, rt: &Runtime, model: &Llama, budget: u64, path: &Path) -> Result<()> {
    for (v, what) in [
        (args.step_ms, "--step-ms"),
        (args.rate_scale, "--rate-scale"),
    ] {
        if !(v.is_finite() && v > 0.0) {
            let e = tensormem::ArgumentError::invalid_value(
                what,
                v.to_string(),
                "a finite number above 0",
            );
            return Err(e.into());
        }
    }
    let mut kv = kv_cache(args, rt, model, budget)?;
    let geometry = *kv.geometry();
    let (_, stride) = kv.segment_shape();
    let cfg = &model.decoder.cfg;
    let requests = trace::read(path, Some(args.requests))?;
    let (scaled, factor) = serve::scale(&requests, cfg.max_position_embeddings);
    let config = EngineConfig {
        step_tokens: args.step_tokens as usize,
        salt: 0,
    };
    let mut engine = Engine::new(&model.decoder, &mut kv, budget, args.preempt, config);
    let serve_cfg = ServeConfig {
        step_ms: args.step_ms,
        rate_scale: args.rate_scale,
        context: cfg.max_position_embeddings,
        vocab: cfg.vocab_size,
    };
    let started = std::time::Instant::now();
    let ours = serve::serve(&mut engine, &geometry, stride, &scaled, &serve_cfg)?;
    let wall = started.elapsed().as_secs_f64();
    let stats = engine.stats().clone();
    drop(engine);
    kv.release()?;
    // The simulator's run of the same scaled trace, same geometry, budget and step size.
    let sim_cfg = SimConfig {
        step_ms: args.step_ms,
        step_tokens: args.step_tokens as usize,
        token_us: 0.0,
        rate_scale: args.rate_scale,
        link_gbps: 25.0,
        shared_prefix: 0,
        max_seq: cfg.max_position_embeddings,
    };
    let paged = PagedConfig {
        swap: args.preempt == Preemption::Swap,
        ..PagedConfig::default()
    };
    let mut policy = Paged::new("simulator", &geometry, budget, scaled.len(), paged)?;
    let sim = simulate(&mut policy, &scaled, &sim_cfg);
    let results = [ours, sim];
    let title = format!(
        "{}: {} requests, lengths x{factor:.3}, {} KV, budget {} MiB, block {}; engine wall {wall:.1} s, decode {:.1} tokens/s",
        path.display(),
        scaled.len(),
        geometry.dtype.name(),
        budget >> 20,
        geometry.block_tokens,
        stats.decode_tokens as f64 / stats.decode_secs.max(1e-9),
    );
    if args.json {
        let doc = json!({
            "trace": path.display().to_string(),
            "requests": scaled.len(),
            "length_scale": factor,
            "kv_budget_bytes": budget,
            "block_tokens": geometry.block_tokens,
            "wall_secs": wall,
            "engine": stats_json(&stats),
            "policies": results,
        });
        emit(&format!("{doc:#}\n"));
    } else {
        emit(&format!("{title}\n{}", table(&results)));
    }
    Ok(())
}

fn stats_json(s: &tensormem_examples::models::llama::EngineStats) -> serde_json::Value {
    json!({
        "steps": s.steps, "prefill_tokens": s.prefill_tokens, "decode_tokens": s.decode_tokens,
        "prefill_secs": s.prefill_secs, "decode_secs": s.decode_secs,
        "recomputed_tokens": s.recomputed_tokens, "preemptions": s.preemptions,
        "max_batch": s.max_batch, "peak_kv_blocks": s.peak_kv_blocks,
    })
}

fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::Context => "context",
    }
}
