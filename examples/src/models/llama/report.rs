//! What `generate` prints after the tokens: device memory (weights, KV cache, activations), the
//! KV cache's blocks, utilization, prefix hits and swaps, and prefill and decode speed.

use serde_json::{Value, json};
use tensormem::kv::KvCacheStats;
use tensormem::pool::{ReplayStats, SpillStats};

use super::requests::EngineStats;
use crate::models::report::bytes;

/// The report of one `generate` run.
#[derive(Clone, Debug)]
pub struct GenerateReport {
    /// Device bytes of the weights.
    pub weight_bytes: u64,
    /// The KV cache's counters at the end of the run.
    pub kv: KvCacheStats,
    /// Block size in tokens.
    pub block_tokens: u32,
    /// KV element type.
    pub kv_dtype: &'static str,
    /// The engine's counters.
    pub engine: EngineStats,
    /// Peak bytes of device memory the run held (the runtime's account: weights, KV cache,
    /// activations and every other block).
    pub device_peak: u64,
    /// The record-and-replay pool's counters, when steps ran through one.
    pub replay: Option<ReplayStats>,
    /// The device budget and the spilling pool's counters, when the run had a budget.
    pub spill: Option<(u64, SpillStats)>,
}

fn rate(tokens: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

impl GenerateReport {
    /// Weights + the KV cache + the activations' lower bound from the planner (0 without a
    /// replay pool): what the run's device memory cannot go below.
    pub fn device_bound(&self) -> u64 {
        self.weight_bytes + self.kv.device_bytes + self.replay.as_ref().map_or(0, |r| r.lower_bound)
    }

    /// Prefill tokens per second.
    pub fn prefill_rate(&self) -> f64 {
        rate(self.engine.prefill_tokens, self.engine.prefill_secs)
    }

    /// Decode tokens per second.
    pub fn decode_rate(&self) -> f64 {
        rate(self.engine.decode_tokens, self.engine.decode_secs)
    }

    /// Key and value bytes read per second of decoding.
    pub fn kv_read_rate(&self) -> f64 {
        rate(self.engine.decode_kv_bytes, self.engine.decode_secs)
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let l = &self.kv.ledger;
        let e = &self.engine;
        let mut s = String::new();
        s.push_str("memory\n");
        s.push_str(&format!(
            "  weights          {}\n",
            bytes(self.weight_bytes)
        ));
        s.push_str(&format!(
            "  kv cache         {} in {} segment(s), {} KV, {} tokens/block\n",
            bytes(self.kv.device_bytes),
            self.kv.segments,
            self.kv_dtype,
            self.block_tokens
        ));
        s.push_str(&format!(
            "  device peak      {} held: {:.3}x weights + KV + activation lower bound ({})\n",
            bytes(self.device_peak),
            self.device_peak as f64 / self.device_bound().max(1) as f64,
            bytes(self.device_bound())
        ));
        if let Some(r) = &self.replay {
            s.push_str(&format!(
                "  activations      {} planned arena (lower bound {}), {} shapes; {} of {} \
                 allocations from plans\n",
                bytes(r.arena_size),
                bytes(r.lower_bound),
                r.shapes,
                r.planned,
                r.planned + r.dynamic
            ));
        }
        if let Some((budget, sp)) = &self.spill {
            s.push_str(&format!(
                "  device budget    {}: {} spills ({} out), {} restores ({} in)\n",
                bytes(*budget),
                sp.spills,
                bytes(sp.bytes_out),
                sp.restores,
                bytes(sp.bytes_in)
            ));
        }
        s.push_str("kv cache\n");
        s.push_str(&format!(
            "  blocks           {} held, peak {} in use, {} cached prefix\n",
            l.capacity_blocks, self.engine.peak_kv_blocks, l.cached_blocks
        ));
        s.push_str(&format!(
            "  utilization      {:.1}% of the token slots of blocks in use\n",
            100.0 * self.kv.utilization
        ));
        s.push_str(&format!(
            "  prefix cache     {} hits, {} misses, {} evictions\n",
            l.prefix_hits, l.prefix_misses, l.evictions
        ));
        s.push_str(&format!(
            "  preemption       {} ({} swaps out, {} in, {} recomputes), {} copy-on-write\n",
            e.preemptions, l.swap_outs, l.swap_ins, l.recomputes, l.cow_copies
        ));
        s.push_str("speed\n");
        s.push_str(&format!(
            "  prefill          {} tokens, {:.1} tokens/s\n",
            e.prefill_tokens,
            self.prefill_rate()
        ));
        s.push_str(&format!(
            "  decode           {} tokens, {:.1} tokens/s ({} steps, batch up to {})\n",
            e.decode_tokens,
            self.decode_rate(),
            e.steps,
            e.max_batch
        ));
        s.push_str(&format!(
            "  kv reads         {:.2} GB/s while decoding\n",
            self.kv_read_rate() / 1e9
        ));
        s
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let l = &self.kv.ledger;
        let e = &self.engine;
        json!({
            "weight_bytes": self.weight_bytes,
            "device_peak_bytes": self.device_peak,
            "device_bound_bytes": self.device_bound(),
            "device_budget": self.spill.as_ref().map(|(b, sp)| json!({
                "bytes": b, "spills": sp.spills, "restores": sp.restores,
                "bytes_out": sp.bytes_out, "bytes_in": sp.bytes_in,
            })),
            "activations": self.replay.as_ref().map(|r| json!({
                "arena_bytes": r.arena_size, "lower_bound_bytes": r.lower_bound,
                "shapes": r.shapes, "planned_allocations": r.planned,
                "dynamic_allocations": r.dynamic, "divergences": r.divergences,
            })),
            "kv": {
                "dtype": self.kv_dtype,
                "block_tokens": self.block_tokens,
                "device_bytes": self.kv.device_bytes,
                "segments": self.kv.segments,
                "blocks": l.capacity_blocks,
                "peak_blocks_in_use": e.peak_kv_blocks,
                "cached_blocks": l.cached_blocks,
                "utilization": self.kv.utilization,
                "prefix_hits": l.prefix_hits,
                "prefix_misses": l.prefix_misses,
                "evictions": l.evictions,
                "swap_outs": l.swap_outs,
                "swap_ins": l.swap_ins,
                "recomputes": l.recomputes,
                "cow_copies": l.cow_copies,
            },
            "timings": {
                "steps": e.steps,
                "max_batch": e.max_batch,
                "preemptions": e.preemptions,
                "prefill_tokens": e.prefill_tokens,
                "prefill_secs": e.prefill_secs,
                "prefill_tokens_per_s": self.prefill_rate(),
                "decode_tokens": e.decode_tokens,
                "decode_secs": e.decode_secs,
                "decode_tokens_per_s": self.decode_rate(),
                "recomputed_tokens": e.recomputed_tokens,
                "decode_kv_bytes": e.decode_kv_bytes,
                "kv_read_bytes_per_s": self.kv_read_rate(),
            },
        })
    }
}
