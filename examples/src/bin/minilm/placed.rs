//! `minilm --devices N` / `--device-backends LIST`: the model split across a device set, balanced
//! by weight bytes, with each device's share of memory and the traffic between them in the report.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tensormem::devices::PlacedReport;
use tensormem::{DeviceSet, PoolConfig, Result, RuntimeConfig};
use tensormem_examples::backend_select::{self, BackendChoice};
use tensormem_examples::cli::{self, DeviceBudget};
use tensormem_examples::models::minilm::{self, MiniLm};
use tensormem_examples::models::report::bytes;
use tensormem_examples::outln;

use super::Args;

/// Embeds `sentences` on the device set the flags describe and prints the embeddings, the
/// similarities and the per-device report.
pub(crate) fn run(args: &Args, model_dir: &Path, sentences: &[String]) -> Result<()> {
    let s = &args.sample;
    let choices: Vec<BackendChoice> = if args.device_backends.is_empty() {
        vec![s.device.backend; args.devices as usize]
    } else {
        args.device_backends.clone()
    };
    let budget =
        DeviceBudget::bytes_only(s.device_budget, "a size per device (with several devices)")?;
    let config = RuntimeConfig {
        device: PoolConfig {
            budget,
            ..PoolConfig::device()
        },
        force_staging: args.force_staging,
        ..RuntimeConfig::default()
    };
    let backends = choices
        .iter()
        .map(|&c| backend_select::select(c, &s.device.select_options()).map(|sel| sel.backend))
        .collect::<Result<Vec<_>>>()?;
    let set = DeviceSet::new(backends, config)?;

    let loading = cli::spinner("loading and checking the model", s.json);
    let weights = args.load.open(s, model_dir)?;
    let model = MiniLm::with_weights(
        set.device(tensormem::DeviceId(0))?,
        model_dir,
        weights,
        s.weights.format(),
    )?;
    loading.set_message("compiling across the devices and running");
    let (emb, mut placed) =
        model.embed_placed(&set, &tensormem::Placement::BalancedByWeights, sentences)?;
    loading.finish_and_clear();
    let mut times = Vec::with_capacity(s.runs as usize);
    for _ in 0..s.runs {
        let start = Instant::now();
        placed.run(&emb.tokens)?;
        times.push(start.elapsed());
    }
    let mean = times.iter().sum::<Duration>() / s.runs.max(1);
    let report = placed.model.report();
    let (batch, seq) = (emb.tokens.batch, emb.tokens.seq);
    let sims = minilm::cosine_matrix(&emb.vectors);
    let mut text = String::new();
    if s.json {
        let items: Vec<_> = sentences
            .iter()
            .zip(&emb.vectors)
            .map(|(s, v)| json!({ "sentence": s, "embedding": v }))
            .collect();
        let out = json!({
            "model": "all-MiniLM-L6-v2",
            "sentences": items,
            "cosine": sims,
            "shape": { "batch": batch, "seq": seq },
            "mean_run_ms": mean.as_secs_f64() * 1e3,
            "devices": devices_json(&set, &report),
            "stages": report.stages.iter().map(|(d, first, nodes)| {
                json!({ "device": d.0, "first_node": first, "nodes": nodes })
            }).collect::<Vec<_>>(),
            "transfer_bytes_per_run": report.transfer_bytes_per_run,
        });
        outln!(text, "{out}");
    } else {
        super::write_embeddings(&mut text, sentences, &emb, &sims);
        outln!(
            text,
            "batch {batch} x seq {seq} on {} devices, {} stages, {} copied between devices per run, {:.2} ms per run ({} runs)",
            set.len(),
            report.stages.len(),
            bytes(report.transfer_bytes_per_run),
            mean.as_secs_f64() * 1e3,
            s.runs
        );
        outln!(
            text,
            "| device | backend | nodes | weights | activations (planned) | inputs/outputs | peak reserved | budget |"
        );
        outln!(text, "|---|---|---:|---:|---:|---:|---:|---:|");
        for (d, rt) in report.devices.iter().zip(set.runtimes()) {
            let caps = rt.backend().capabilities();
            outln!(
                text,
                "| {} | {} ({}) | {} | {} | {} | {} | {} | {} |",
                d.device.0,
                caps.backend,
                caps.device_name,
                d.nodes,
                bytes(d.weight_bytes),
                bytes(d.activation_planned_bytes),
                bytes(d.io_bytes),
                bytes(d.peak_reserved),
                d.budget.map_or_else(|| "none".to_string(), bytes)
            );
        }
    }
    cli::emit(&text);
    Ok(())
}

/// Each device's share as JSON. Sizes in bytes.
fn devices_json(set: &DeviceSet, report: &PlacedReport) -> Vec<serde_json::Value> {
    report
        .devices
        .iter()
        .zip(set.runtimes())
        .map(|(d, rt)| {
            let caps = rt.backend().capabilities();
            json!({
                "device": d.device.0,
                "backend": caps.backend,
                "device_name": caps.device_name,
                "stages": d.stages,
                "nodes": d.nodes,
                "weight_bytes": d.weight_bytes,
                "activation_planned_bytes": d.activation_planned_bytes,
                "io_bytes": d.io_bytes,
                "peak_reserved_bytes": d.peak_reserved,
                "budget_bytes": d.budget,
            })
        })
        .collect()
}
