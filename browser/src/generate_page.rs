//! The text generation page's entry point: the native `generate` sample's Llama decoder, paged KV
//! cache and continuous-batching engine on the browser's WebGPU, every step awaited, tokens
//! streamed to the page as they come, and the run's figures returned as one JSON document.
//!
//! As natively (`generate --kv-dtype f32 --preempt recompute`): the runtime's pool is a
//! record-and-replay pool over an arena, so repeated step shapes replay one planned arena; the
//! KV cache takes its blocks from the same pool, in segments no larger than the device's largest
//! buffer, and preempts by recomputation (swapping blocks to host memory would block). An
//! optional `max_buffer` lowers the device's largest buffer and binding (a wrapper over the
//! backend), so a test shows a cache larger than one buffer spanning several.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use tensormem::kv::{KvCache, KvCacheConfig, KvDType, Preemption};
use tensormem::pool::{ReplayConfig, ReplayPool};
use tensormem::{ArenaConfig, ArenaPool, Backend, Runtime, RuntimeConfig, WeightFormat};
use tensormem_conformance::inject::Faulty;
use tensormem_wgpu::{WgpuBackend, WgpuConfig};
use wasm_bindgen::prelude::*;
use web_time::Instant;

use crate::models::llama::{Engine, EngineConfig, Event, Finish, Llama, Request, Sampling};
use crate::models::weights::WeightFile;
use crate::page::js;

/// What the page asks for (its `params` JSON).
#[derive(Deserialize)]
struct Params {
    prompts: Vec<String>,
    max_new_tokens: usize,
    #[serde(default)]
    ignore_eos: bool,
    #[serde(default = "default_step_tokens")]
    step_tokens: usize,
    #[serde(default = "default_kv_budget")]
    kv_budget: u64,
    /// Largest buffer and binding in bytes (0: the device's own).
    #[serde(default)]
    max_buffer: u64,
}

fn default_step_tokens() -> usize {
    256
}

fn default_kv_budget() -> u64 {
    64 << 20
}

/// Generates from every prompt of `params` (JSON: `prompts`, `max_new_tokens`, optional
/// `ignore_eos`, `step_tokens`, `kv_budget`, `max_buffer`) with the Llama checkpoint whose
/// files the page fetched (`model.safetensors` bytes, `config.json` text, `tokenizer.json`
/// bytes), greedily, calling `on_token(prompt_index, text_so_far)` after each token.
///
/// Returns JSON: `device`, `outputs` (`prompt`, `prompt_ids`, `tokens`, `text`, `finish` each,
/// as `generate --json`), `load_ms`, `timings` (steps, prefill and decode tokens and tokens per
/// second, preemptions), `kv` (segments, their bytes, blocks, peak utilization, prefix hits,
/// recomputes), `memory` (weights, the pool's peak, replayed and dynamic allocations).
///
/// # Errors
/// A rejected promise with the message: malformed files or parameters, an unsupported config
/// (named), no WebGPU adapter, a KV budget below one request, runtime errors.
#[wasm_bindgen]
pub async fn run_generate(
    weights: Vec<u8>,
    config: String,
    tokenizer: Vec<u8>,
    params: String,
    on_token: js_sys::Function,
) -> Result<String, JsValue> {
    let p: Params = serde_json::from_str(&params).map_err(|e| js(format!("params: {e}")))?;
    if p.prompts.is_empty() || p.max_new_tokens == 0 {
        return Err(js("params: no prompts, or max_new_tokens 0"));
    }
    let start = Instant::now();
    let file = WeightFile::from_bytes(Path::new("model.safetensors"), weights).map_err(js)?;
    let wgpu = WgpuBackend::new_async(WgpuConfig::default())
        .await
        .map_err(js)?;
    let device = wgpu.capabilities().device_name.clone();
    let backend: Arc<dyn Backend> = if p.max_buffer > 0 {
        Arc::new(Faulty::with_block_limit(Arc::new(wgpu), p.max_buffer))
    } else {
        Arc::new(wgpu)
    };
    let mut replay = None;
    let rt = Runtime::with_pool(backend, RuntimeConfig::default(), |front, budget| {
        let arena = Arc::new(ArenaPool::with_budget(
            front,
            ArenaConfig::device(),
            budget,
        )?);
        let pool = Arc::new(ReplayPool::new(arena, ReplayConfig::default()));
        replay = Some(pool.clone());
        Ok(pool)
    })
    .map_err(js)?;
    let mut model = Llama::load_async(&rt, &config, &tokenizer, file, WeightFormat::F32)
        .await
        .map_err(js)?;
    model.decoder.replay = replay.clone();
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let result = generate(&rt, &model, &p, &on_token).await;
    let released = model.decoder.weights.release(&rt);
    let mut doc = result.map_err(js)?;
    released.map_err(js)?;
    doc["device"] = json!(device);
    doc["load_ms"] = json!(load_ms);
    if let Some(r) = &replay {
        let s = r.replay_stats();
        doc["memory"]["replay"] = json!({
            "arena_bytes": s.arena_size, "lower_bound_bytes": s.lower_bound,
            "planned_allocations": s.planned, "dynamic_allocations": s.dynamic,
        });
    }
    Ok(doc.to_string())
}

/// The engine's run over the loaded model: every prompt admitted at once, stepped until idle.
async fn generate(
    rt: &Runtime,
    model: &Llama,
    p: &Params,
    on_token: &js_sys::Function,
) -> tensormem::Result<serde_json::Value> {
    let geometry = model.kv_geometry(KvDType::F32, 0)?;
    let mut kv = KvCache::new(
        rt,
        KvCacheConfig {
            geometry,
            budget: p.kv_budget,
            preemption: Preemption::Recompute,
        },
    )?;
    let stop = if p.ignore_eos {
        Vec::new()
    } else {
        model.decoder.cfg.eos_ids()
    };
    let prompts: Vec<Vec<u32>> = p
        .prompts
        .iter()
        .map(|s| model.encode(s))
        .collect::<tensormem::Result<_>>()?;
    let config = EngineConfig {
        step_tokens: p.step_tokens,
        salt: 0,
    };
    let mut engine = Engine::new(
        &model.decoder,
        &mut kv,
        p.kv_budget,
        Preemption::Recompute,
        config,
    );
    for prompt in &prompts {
        engine.add(Request {
            prompt: prompt.clone(),
            max_new_tokens: p.max_new_tokens,
            sampling: Sampling::default(),
            stop: stop.clone(),
        })?;
    }
    let n = prompts.len();
    let mut tokens = vec![Vec::new(); n];
    let mut finish: Vec<Option<Finish>> = vec![None; n];
    let (mut max_segment, mut peak_utilization) = (0, 0f64);
    while !engine.is_idle() {
        for event in engine.step_async().await? {
            match event {
                Event::Token { id, token } => {
                    tokens[id].push(token);
                    let text = model.decode(&tokens[id])?;
                    let _ = on_token.call2(&JsValue::NULL, &JsValue::from(id as u32), &text.into());
                }
                Event::Finished { id, finish: f } => finish[id] = Some(f),
                Event::Admitted { .. } => {}
            }
        }
        let cache = engine.cache();
        max_segment = cache
            .segments()
            .iter()
            .map(|t| t.size())
            .fold(max_segment, u64::max);
        peak_utilization = peak_utilization.max(cache.stats().utilization);
    }
    let stats = engine.stats().clone();
    let kv_stats = engine.cache().stats();
    drop(engine);
    kv.release()?;
    let outputs = (0..n)
        .map(|i| {
            Ok(json!({
                "prompt": p.prompts[i],
                "prompt_ids": prompts[i],
                "tokens": tokens[i],
                "text": model.decode(&tokens[i])?,
                "finish": finish[i].map(|f| format!("{f:?}").to_lowercase()),
            }))
        })
        .collect::<tensormem::Result<Vec<_>>>()?;
    let rate = |tokens: u64, secs: f64| {
        if secs > 0.0 {
            tokens as f64 / secs
        } else {
            0.0
        }
    };
    let l = &kv_stats.ledger;
    Ok(json!({
        "outputs": outputs,
        "timings": {
            "steps": stats.steps,
            "max_batch": stats.max_batch,
            "preemptions": stats.preemptions,
            "prefill_tokens": stats.prefill_tokens,
            "prefill_tokens_per_s": rate(stats.prefill_tokens, stats.prefill_secs),
            "decode_tokens": stats.decode_tokens,
            "decode_tokens_per_s": rate(stats.decode_tokens, stats.decode_secs),
            "recomputed_tokens": stats.recomputed_tokens,
        },
        "kv": {
            "block_tokens": geometry.block_tokens,
            "segments": kv_stats.segments,
            "device_bytes": kv_stats.device_bytes,
            "largest_segment_bytes": max_segment,
            "peak_blocks_in_use": stats.peak_kv_blocks,
            "peak_utilization": peak_utilization,
            "prefix_hits": l.prefix_hits,
            "recomputes": l.recomputes,
        },
        "memory": {
            "weight_bytes": model.decoder.weights.bytes,
            "pool_peak_bytes": rt.allocation_stats().map(|s| s.peak_in_use),
        },
    }))
}
