//! The MNIST sample page's entry point: the native `mnist` sample's graph, plan and weights on the
//! browser's WebGPU, with everything the page shows returned as one JSON document.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tensormem::{Backend, MemoryReport, Runtime, RuntimeConfig, Tracer};
use tensormem_wgpu::{WgpuBackend, WgpuConfig};
use wasm_bindgen::prelude::*;
use web_time::Instant;

use crate::models::mnist::{self, CLASSES, PIXELS};
use crate::models::weights::WeightFile;

/// An error as the message of a rejected promise.
pub(crate) fn js(e: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&e.to_string())
}

/// Classifies `images` (a batch of raw 28×28 `u8` images, concatenated) with the MNIST CNN whose
/// safetensors `weights` the page fetched, then times `runs` more inferences of the same batch.
///
/// Returns JSON: `device`, `logits` (one row of 10 per image), `predictions`, `first_run_ms`,
/// `per_inference_ms` (mean of the timed runs: upload, run, read back), `memory` (the model's
/// memory report), `timeline_html` (the trace of the whole session as the self-contained HTML
/// timeline `tensormem-report --html` writes).
///
/// # Errors
/// A rejected promise with the message: no WebGPU adapter, malformed weights or images, runtime
/// errors.
#[wasm_bindgen]
pub async fn run_mnist(weights: Vec<u8>, images: Vec<u8>, runs: u32) -> Result<String, JsValue> {
    if images.is_empty() || images.len() % PIXELS != 0 {
        return Err(js(format!(
            "images: {} bytes is not a whole number of 28x28 images",
            images.len()
        )));
    }
    let batch = images.len() / PIXELS;
    let weights = WeightFile::from_bytes(Path::new("mnist.safetensors"), weights).map_err(js)?;
    let backend = WgpuBackend::new_async(WgpuConfig::default())
        .await
        .map_err(js)?;
    let device = backend.capabilities().device_name.clone();
    let rt = Runtime::new(Arc::new(backend), RuntimeConfig::default()).map_err(js)?;
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));

    let graph = mnist::build_graph(batch, tensormem::WeightFormat::F32).map_err(js)?;
    let mut model = rt.compile(&graph.builder.graph).map_err(js)?;
    for slot in &graph.builder.weights {
        let bytes = weights.f32_bytes(&slot.name, &slot.shape).map_err(js)?;
        model.set_weight_async(slot.id, bytes).await.map_err(js)?;
    }
    let input: Vec<f32> = mnist::normalize(&images);
    let infer = async |model: &mut tensormem::Model| -> tensormem::Result<Vec<f32>> {
        model
            .set_input_async(graph.image, bytemuck::cast_slice(&input))
            .await?;
        model.run_async().await?;
        model.read_output_async(graph.logits).await
    };
    let start = Instant::now();
    let logits = infer(&mut model).await.map_err(js)?;
    let first_run_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    for _ in 0..runs {
        infer(&mut model).await.map_err(js)?;
    }
    let per_inference_ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(runs.max(1));

    let rows: Vec<Vec<f32>> = logits.chunks_exact(CLASSES).map(<[f32]>::to_vec).collect();
    let predictions: Vec<usize> = rows.iter().map(|r| mnist::argmax(r)).collect();
    let memory = memory_json(&model.memory_report());
    drop(model); // its frees belong in the timeline
    let timeline_html = tracer
        .snapshot()
        .to_html("tensormem: MNIST in the browser (WebGPU)");
    Ok(json!({
        "device": device,
        "batch": batch,
        "logits": rows,
        "predictions": predictions,
        "first_run_ms": first_run_ms,
        "per_inference_ms": per_inference_ms,
        "timed_runs": runs,
        "memory": memory,
        "timeline_html": timeline_html,
    })
    .to_string())
}

/// The memory report figures the sample pages show.
pub(crate) fn memory_json(r: &MemoryReport) -> serde_json::Value {
    json!({
        "weight_bytes": r.weight_bytes,
        "io_bytes": r.io_bytes,
        "activation_planned_bytes": r.activation_planned_bytes,
        "activation_no_reuse_bytes": r.activation_no_reuse_bytes,
        "activation_lower_bound_bytes": r.activation_lower_bound_bytes,
        "activation_greedy_bytes": r.activation_greedy_bytes,
        "plan_algorithm": r.plan_algorithm,
        "planned_buffers": r.planned_buffers,
        "device_blocks_allocated": r.device_blocks_allocated,
        "staging_blocks_allocated": r.staging_blocks_allocated,
        "staging_bytes_moved": r.staging_bytes_moved,
        "runs": r.runs,
    })
}
