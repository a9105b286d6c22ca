//! `tensormem-kv`: paged KV cache tools. `tensormem-kv replay TRACE.csv` replays an LLM request
//! trace (Azure format) with continuous batching against four KV memory policies and reports
//! utilization, concurrency, preemptions and queueing for each. `--help` lists the flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tensormem::kv::{KvDType, KvGeometry};
use tensormem_examples::cli::{self, DeviceBudget, EXIT_CODES, emit};
use tensormem_examples::serving::contiguous::Contiguous;
use tensormem_examples::serving::paged::{Paged, PagedConfig};
use tensormem_examples::serving::policy::KvPolicy;
use tensormem_examples::serving::sim::{SimConfig, SimResult, simulate};
use tensormem_examples::serving::{report, trace};

/// Paged KV cache tools.
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a request trace (`TIMESTAMP,ContextTokens,GeneratedTokens`) against the policies
    /// `paged` (tensormem's defaults: swap, a growth reserve), `paged_vllm` (the same cache with
    /// vLLM's: recomputation, a 1% watermark), `contiguous_max` (a region of the maximum length
    /// per request) and `contiguous_exact` (exact regions from TLSF, lengths known in advance).
    Replay(Replay),
}

#[derive(clap::Args, Debug)]
struct Replay {
    /// The trace.
    #[arg(value_name = "TRACE.csv")]
    trace: PathBuf,
    /// Model geometry: llama3-8b, llama2-7b, qwen2-0.5b, smollm2-135m, or
    /// `layers,kv_heads,head_dim[,max_seq]`.
    #[arg(long, default_value = "llama3-8b")]
    geometry: String,
    /// KV element type: f32, f16 or int8 (one f32 scale per block and head).
    #[arg(long, default_value = "f16")]
    kv_dtype: String,
    /// Device memory for the KV cache (e.g. 8GiB).
    #[arg(long, value_name = "SIZE", default_value = "8GiB", value_parser = cli::parse_device_budget)]
    kv_budget: DeviceBudget,
    /// Tokens per block of `paged` (`paged_vllm` keeps vLLM's 16).
    #[arg(long, value_name = "N", default_value_t = 8)]
    block: u32,
    /// How `paged` preempts: `swap` (to host memory and back) or `recompute`.
    #[arg(long, default_value = "swap", value_parser = ["swap", "recompute"])]
    preempt: String,
    /// `paged` admits a request only while the running ones keep enough free blocks to grow by
    /// this many tokens each (0: vLLM's 1% watermark alone).
    #[arg(long, value_name = "TOKENS", default_value_t = PagedConfig::default().growth_reserve)]
    growth_reserve: usize,
    /// `paged`'s admission look-ahead: when the first waiting request does not fit, up to this
    /// many after it may be admitted past it (0: first come first served, as vLLM).
    #[arg(long, value_name = "N", default_value_t = PagedConfig::default().lookahead.0)]
    lookahead: usize,
    /// How many admissions may pass one waiting request before it is admitted itself.
    #[arg(long, value_name = "N", default_value_t = PagedConfig::default().lookahead.1)]
    passes: usize,
    /// Replay only the first N requests.
    #[arg(long, value_name = "N")]
    requests: Option<usize>,
    /// Leading prompt tokens every request shares (a synthetic system prompt).
    #[arg(long, value_name = "TOKENS", default_value_t = 0)]
    shared_prefix: usize,
    /// Maximum sequence length (contiguous_max's region; longer requests are rejected by every
    /// policy). Default: the geometry's context length.
    #[arg(long, value_name = "TOKENS")]
    max_seq: Option<usize>,
    /// Simulated milliseconds per step.
    #[arg(long, default_value_t = 40.0)]
    step_ms: f64,
    /// Tokens one step computes (decode tokens and prefill chunks).
    #[arg(long, default_value_t = 2048)]
    step_tokens: usize,
    /// Simulated microseconds each prefilled or recomputed token adds to its step.
    #[arg(long, default_value_t = 40.0)]
    token_us: f64,
    /// Replay arrivals this many times faster than the trace.
    #[arg(long, default_value_t = 1.0)]
    rate_scale: f64,
    /// Host link bandwidth for swaps, GB/s.
    #[arg(long, default_value_t = 25.0)]
    link_gbps: f64,
    /// Print JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Write utilization and running requests over time as SVG.
    #[arg(long, value_name = "OUT.svg")]
    svg: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Replay(r) => cli::exit("tensormem-kv", replay(&r)),
    }
}

fn replay(a: &Replay) -> tensormem::Result<()> {
    let budget = a.kv_budget.bytes("--kv-budget", "a size")?;
    let positive = |v: f64, what: &str| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            let e = tensormem::ArgumentError::invalid_value(
                what,
                v.to_string(),
                "a finite number above 0",
            );
            Err(tensormem::Error::from(e))
        }
    };
    positive(a.step_ms, "--step-ms")?;
    positive(a.rate_scale, "--rate-scale")?;
    positive(a.link_gbps, "--link-gbps")?;
    if !(a.token_us.is_finite() && a.token_us >= 0.0) {
        let (token_us, expected) = (a.token_us.to_string(), "a finite number of at least 0");
        return Err(
            tensormem::ArgumentError::invalid_value("--token-us", token_us, expected).into(),
        );
    }
    if a.step_tokens == 0 {
        return Err(tensormem::ArgumentError::zero("--step-tokens").into());
    }
    let mut geometry = KvGeometry::parse(&a.geometry, KvDType::parse(&a.kv_dtype)?, a.block)?;
    if let Some(m) = a.max_seq {
        geometry = KvGeometry::new(
            geometry.layers,
            geometry.kv_heads,
            geometry.head_dim,
            geometry.dtype,
            a.block,
            u32::try_from(m).unwrap_or(u32::MAX),
        )?;
    }
    let requests = trace::read(&a.trace, a.requests)?;
    let cfg = SimConfig {
        step_ms: a.step_ms,
        step_tokens: a.step_tokens,
        token_us: a.token_us,
        rate_scale: a.rate_scale,
        link_gbps: a.link_gbps,
        shared_prefix: a.shared_prefix,
        max_seq: geometry.max_seq as usize,
    };
    let n = requests.len();
    let ours = PagedConfig {
        swap: a.preempt == "swap",
        growth_reserve: a.growth_reserve,
        lookahead: (a.lookahead, a.passes),
    };
    let vllm = PagedConfig::VLLM;
    let mut policies: Vec<Box<dyn KvPolicy>> = vec![
        Box::new(Paged::new("paged", &geometry, budget, n, ours)?),
        Box::new(Paged::new(
            "paged_vllm",
            &KvGeometry {
                block_tokens: 16,
                ..geometry
            },
            budget,
            n,
            vllm,
        )?),
        Box::new(Contiguous::max(
            budget,
            geometry.token_bytes(),
            u64::from(geometry.max_seq),
            n,
        )),
        Box::new(Contiguous::exact(budget, geometry.token_bytes(), n)?),
    ];
    let results: Vec<SimResult> = policies
        .iter_mut()
        .map(|p| simulate(p.as_mut(), &requests, &cfg))
        .collect();
    let title = format!(
        "{} — {} requests, {} {} KV, budget {} MiB, block {}",
        a.trace.display(),
        n,
        a.geometry,
        geometry.dtype.name(),
        budget >> 20,
        geometry.block_tokens
    );
    if let Some(path) = &a.svg {
        cli::write_file(path, report::svg(&results, &title))?;
    }
    if a.json {
        let doc = serde_json::json!({
            "trace": a.trace.display().to_string(),
            "requests": n,
            "geometry": { "name": a.geometry, "layers": geometry.layers, "kv_heads": geometry.kv_heads,
                          "head_dim": geometry.head_dim, "dtype": geometry.dtype.name(),
                          "block_tokens": geometry.block_tokens, "max_seq": geometry.max_seq,
                          "block_bytes": geometry.block_bytes() },
            "kv_budget_bytes": budget,
            "shared_prefix": a.shared_prefix,
            "paged": { "block_tokens": geometry.block_tokens, "preempt": a.preempt, "growth_reserve": a.growth_reserve },
            "step_ms": a.step_ms, "step_tokens": a.step_tokens, "token_us": a.token_us, "rate_scale": a.rate_scale,
            "policies": results,
        });
        emit(&format!("{doc:#}\n"));
    } else {
        emit(&format!("{title}\n{}", report::table(&results)));
    }
    Ok(())
}
