//! The MiniLM sample page's entry point: the native `minilm` sample's tokenizer, graph, plan and
//! weights on the browser's WebGPU, with everything the page shows returned as one JSON document.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tensormem::{Backend, Model, Runtime, RuntimeConfig, Tracer, WeightFormat};
use tensormem_wgpu::{WgpuBackend, WgpuConfig};
use wasm_bindgen::prelude::*;
use web_time::Instant;

use crate::models::minilm::{self, BertConfig, MiniLmGraph};
use crate::models::tokenize::{TokenBatch, WordPiece};
use crate::models::weights::WeightFile;
use crate::page::{js, memory_json};

/// Embeds `sentences` (a JSON array of strings) with all-MiniLM-L6-v2 from the three model files
/// the page fetched (`model.safetensors` bytes, `config.json` text, `tokenizer.json` bytes), then
/// times `runs` more inferences of the same batch.
///
/// As the native `minilm`: the files are checked against each other first (config, every weight
/// present with its shape and finite, every token id inside its table), the sentences run as one
/// batch padded to the longest, and the graph is compiled without a device budget.
///
/// Returns JSON: `device`, `sentences` (`sentence`, `token_ids`, `embedding` each), `cosine`
/// (the similarity matrix), `batch`, `seq`, `load_ms` (parse, check, tokenize, compile, upload
/// the weights), `first_run_ms`, `per_inference_ms` (mean of the timed runs: upload the tokens,
/// run, read back), `memory` (the model's memory report), `timeline_html`.
///
/// # Errors
/// A rejected promise with the message: malformed files or sentences, no WebGPU adapter, runtime
/// errors.
#[wasm_bindgen]
pub async fn run_minilm(
    weights: Vec<u8>,
    config: String,
    tokenizer: Vec<u8>,
    sentences: String,
    runs: u32,
) -> Result<String, JsValue> {
    let sentences: Vec<String> = serde_json::from_str(&sentences)
        .map_err(|e| js(format!("sentences: not a JSON array of strings: {e}")))?;
    let start = Instant::now();
    let weights = WeightFile::from_bytes(Path::new("model.safetensors"), weights).map_err(js)?;
    let cfg = BertConfig::from_json(&config, "config.json").map_err(js)?;
    minilm::check_weights_match(&cfg, &weights).map_err(js)?;
    let tokens = WordPiece::from_bytes(&tokenizer, "tokenizer.json")
        .and_then(|t| t.encode_batch(&sentences))
        .map_err(js)?;
    minilm::check_ids(&cfg, &tokens).map_err(js)?;

    let backend = WgpuBackend::new_async(WgpuConfig::default())
        .await
        .map_err(js)?;
    let device = backend.capabilities().device_name.clone();
    let rt = Runtime::new(Arc::new(backend), RuntimeConfig::default()).map_err(js)?;
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    let graph =
        minilm::build_graph(&cfg, tokens.batch, tokens.seq, WeightFormat::F32).map_err(js)?;
    let mut model = rt.compile(&graph.builder.graph).map_err(js)?;
    for slot in &graph.builder.weights {
        let bytes = weights.f32_bytes(&slot.name, &slot.shape).map_err(js)?;
        model.set_weight_async(slot.id, bytes).await.map_err(js)?;
    }
    drop(weights); // on the device now; the page's copy is the only one left
    let load_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let vectors = embed(&mut model, &graph, &tokens, cfg.hidden_size)
        .await
        .map_err(js)?;
    let first_run_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    for _ in 0..runs {
        embed(&mut model, &graph, &tokens, cfg.hidden_size)
            .await
            .map_err(js)?;
    }
    let per_inference_ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(runs.max(1));

    let items: Vec<_> = sentences
        .iter()
        .zip(&vectors)
        .enumerate()
        .map(|(i, (s, v))| {
            let ids = &tokens.ids[i * tokens.seq..i * tokens.seq + tokens.lengths[i]];
            json!({ "sentence": s, "token_ids": ids, "embedding": v })
        })
        .collect();
    let cosine = minilm::cosine_matrix(&vectors);
    let memory = memory_json(&model.memory_report());
    drop(model); // its frees belong in the timeline
    let timeline_html = tracer
        .snapshot()
        .to_html("tensormem: MiniLM in the browser (WebGPU)");
    Ok(json!({
        "device": device,
        "sentences": items,
        "cosine": cosine,
        "batch": tokens.batch,
        "seq": tokens.seq,
        "load_ms": load_ms,
        "first_run_ms": first_run_ms,
        "per_inference_ms": per_inference_ms,
        "timed_runs": runs,
        "memory": memory,
        "timeline_html": timeline_html,
    })
    .to_string())
}

/// One inference: uploads the tokens, runs, reads the embeddings back (one row per sentence),
/// refusing a NaN or infinity as the native sample does.
async fn embed(
    model: &mut Model,
    g: &MiniLmGraph,
    tokens: &TokenBatch,
    hidden: usize,
) -> tensormem::Result<Vec<Vec<f32>>> {
    model
        .set_input_async(g.ids, bytemuck::cast_slice(&tokens.ids))
        .await?;
    model
        .set_input_async(g.positions, bytemuck::cast_slice(&tokens.positions))
        .await?;
    model
        .set_input_async(g.type_ids, bytemuck::cast_slice(&tokens.type_ids))
        .await?;
    model
        .set_input_async(g.mask, bytemuck::cast_slice(&tokens.mask))
        .await?;
    model.run_async().await?;
    let flat: Vec<f32> = model.read_output_async(g.embeddings).await?;
    crate::models::checks::finite("minilm embeddings", &flat, hidden)?;
    Ok(flat.chunks_exact(hidden).map(<[f32]>::to_vec).collect())
}
