//! `minilm`: sentence embeddings with all-MiniLM-L6-v2 on a tensormem backend. Prints the first
//! values of each embedding, the pairwise cosine similarities and the memory report.
//!
//! ```text
//! minilm [--backend auto|host|vulkan|wgpu|cuda] [--json] [--runs N] [--model-dir DIR] [SENTENCE...]
//! minilm [--backend B] [--json] --peak-table
//! ```
//! Without sentences it reads one sentence per non-empty stdin line. All sentences run as one
//! batch, padded to the longest. The model comes from `--model-dir`, default
//! `${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm`; `scripts/fetch_minilm.sh` fills it.
//! `--peak-table` compiles the graph for sequence lengths 8, 128, 512 and batches 1, 8 and prints
//! the activation peak with the plan, without reuse and the lower bound (no weights needed).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensormem::{Error, Result, Runtime, RuntimeConfig};
use tensormem_examples::backend_select;
use tensormem_examples::models::cli::parse_common;
use tensormem_examples::models::minilm::{self, BertConfig, MiniLm};
use tensormem_examples::models::report::{InferenceReport, blocks_allocated, bytes, time_runs};

const USAGE: &str = "usage: minilm [--backend auto|host|vulkan|wgpu|cuda] [--json] [--runs N] \
                     [--model-dir DIR] [--peak-table] [SENTENCE...]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("minilm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let common = parse_common(std::env::args().skip(1))?;
    let mut model_dir = minilm::default_model_dir();
    let mut peak_table = false;
    let mut sentences = Vec::new();
    let mut it = common.rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model-dir" => {
                model_dir = PathBuf::from(
                    it.next()
                        .ok_or_else(|| Error::invalid("--model-dir needs a value"))?,
                );
            }
            s if s.starts_with("--model-dir=") => {
                model_dir = PathBuf::from(&s["--model-dir=".len()..])
            }
            "--peak-table" => peak_table = true,
            s if s.starts_with("--") => {
                return Err(Error::invalid(format!("unknown flag {s}\n{USAGE}")));
            }
            s => sentences.push(s.to_string()),
        }
    }

    let backend = backend_select::select(&common.backend)?;
    let rt = Runtime::new(backend, RuntimeConfig::default())?;

    if peak_table {
        let cfg = if model_dir.join("config.json").is_file() {
            BertConfig::open(&model_dir.join("config.json"))?
        } else {
            BertConfig::all_minilm_l6_v2()
        };
        return print_peak_table(&rt, &cfg, common.json);
    }

    if !minilm::model_dir_ready(&model_dir) {
        return Err(Error::invalid(format!(
            "no MiniLM model in {}: run scripts/fetch_minilm.sh (it needs {:?})",
            model_dir.display(),
            minilm::MODEL_FILES
        )));
    }
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
        return Err(Error::invalid(format!("no sentence given\n{USAGE}")));
    }

    let mut model = MiniLm::open(&rt, &model_dir)?;
    let emb = model.embed(&sentences)?;
    let (batch, seq) = (emb.tokens.batch, emb.tokens.seq);
    let timing = time_runs(
        common.runs,
        &mut model,
        |m| {
            m.set_tokens(&emb.tokens)?;
            m.run(batch, seq)?;
            m.read_embeddings(batch, seq).map(|_| ())
        },
        |m| m.cached_model(batch, seq).map_or(0, blocks_allocated),
    )?;
    let compiled = model
        .cached_model(batch, seq)
        .ok_or_else(|| Error::invalid("minilm: the compiled shape left the cache"))?;
    let report = InferenceReport::new(&rt, compiled, format!("batch {batch} x seq {seq}"), timing);

    let n = sentences.len();
    let sims: Vec<Vec<f32>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| minilm::cosine(&emb.vectors[i], &emb.vectors[j]))
                .collect()
        })
        .collect();
    if common.json {
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
            "report": report.to_json(),
        });
        println!("{out}");
    } else {
        for (i, (s, v)) in sentences.iter().zip(&emb.vectors).enumerate() {
            let head: Vec<String> = v.iter().take(8).map(|x| format!("{x:+.6}")).collect();
            println!("[{i}] {s:?} ({} tokens)", emb.tokens.lengths[i]);
            println!("    embedding[0..8] {}", head.join(" "));
        }
        if n > 1 {
            println!("cosine similarity:");
            for (i, row) in sims.iter().enumerate() {
                let cells: Vec<String> = row.iter().map(|c| format!("{c:7.4}")).collect();
                println!("  [{i}] {}", cells.join(" "));
            }
        }
        println!("{}", report.to_text());
    }
    Ok(())
}

/// Compiles the graph at the table's shapes and prints the three activation figures.
fn print_peak_table(rt: &Runtime, cfg: &BertConfig, as_json: bool) -> Result<()> {
    let mut rows = Vec::new();
    for seq in [8usize, 128, 512] {
        for batch in [1usize, 8] {
            let graph = minilm::build_graph(cfg, batch, seq)?;
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
        println!(
            "{}",
            json!({ "model": "all-MiniLM-L6-v2", "peak_table": items })
        );
    } else {
        println!(
            "| seq | batch | with the plan | without reuse | lower bound | plan / lower bound |"
        );
        println!("|---:|---:|---:|---:|---:|---:|");
        for (seq, batch, plan, no_reuse, lb) in rows {
            let ratio = if lb == 0 {
                0.0
            } else {
                plan as f64 / lb as f64
            };
            println!(
                "| {seq} | {batch} | {} | {} | {} | {ratio:.3} |",
                bytes(plan),
                bytes(no_reuse),
                bytes(lb)
            );
        }
    }
    Ok(())
}
