//! `generate --serve TRACE.csv`: an Azure-format request trace replayed through the real engine,
//! reported with the serving simulator's metrics (`tensormem-kv replay`) so the two can be set
//! side by side on the same trace.
//!
//! Time is the simulator's: step `s` happens at `s × step_ms`, and a request joins the queue at
//! the first step at or after its (rate-scaled) arrival, so batch composition does not depend on
//! how fast the machine computes. Lengths are scaled down together so that the longest request
//! fits the model's context; prompts are seeded random token ids (no special tokens), and each
//! request generates exactly its (scaled) length, stop tokens ignored.

use std::collections::HashMap;

use tensormem::Result;
use tensormem::kv::KvGeometry;

use super::engine::Engine;
use super::requests::{Event, Request};
use super::sampler::Sampling;
use crate::serving::sim::SimResult;
use crate::serving::trace;

/// How a trace is replayed.
#[derive(Clone, Copy, Debug)]
pub struct ServeConfig {
    /// Simulated milliseconds per step.
    pub step_ms: f64,
    /// Arrivals come this many times faster than in the trace.
    pub rate_scale: f64,
    /// Longest request (prompt + generated) after scaling: the model's context.
    pub context: usize,
    /// Vocabulary the random prompts draw from.
    pub vocab: usize,
}

/// Scales `requests` so the longest fits `context` tokens; returns them and the factor.
pub fn scale(requests: &[trace::Request], context: usize) -> (Vec<trace::Request>, f64) {
    let longest = requests
        .iter()
        .map(|r| r.prompt + r.generate)
        .max()
        .unwrap_or(1);
    let f = ((context.saturating_sub(1)) as f64 / longest as f64).min(1.0);
    let scaled = requests
        .iter()
        .map(|r| trace::Request {
            arrival_s: r.arrival_s,
            prompt: ((r.prompt as f64 * f) as usize).max(1),
            generate: ((r.generate as f64 * f) as usize).max(1),
        })
        .collect();
    (scaled, f)
}

/// Replays `requests` (already scaled) through `engine`; the result is labelled `engine`.
///
/// # Errors
/// The engine's errors.
pub fn serve(
    engine: &mut Engine<'_>,
    geometry: &KvGeometry,
    stride: u64,
    requests: &[trace::Request],
    cfg: &ServeConfig,
) -> Result<SimResult> {
    let bt = geometry.block_tokens as usize;
    let step_s = cfg.step_ms / 1000.0;
    let mut next = 0;
    let mut step: u64 = 0;
    let mut arrived_at: HashMap<usize, u64> = HashMap::new();
    let mut r = SimResult {
        policy: "engine".into(),
        capacity_tokens: (engine.max_blocks() * bt) as u64,
        ..SimResult::default()
    };
    let (mut util_sum, mut running_sum, mut queued_sum, mut delay_sum) = (0.0, 0.0, 0.0, 0.0);
    let mut held_steps = 0u64;
    let mut admitted = 0usize;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let vocab = cfg.vocab.max(4) as u64;
    while next < requests.len() || !engine.is_idle() {
        let now = step as f64 * step_s;
        while next < requests.len() && requests[next].arrival_s / cfg.rate_scale <= now {
            let q = requests[next];
            let prompt = (0..q.prompt)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (3 + rng % (vocab - 3)) as u32
                })
                .collect();
            let id = engine.add(Request {
                prompt,
                max_new_tokens: q.generate,
                sampling: Sampling::default(),
                stop: Vec::new(),
            })?;
            arrived_at.insert(id, step);
            next += 1;
        }
        step += 1;
        if engine.is_idle() {
            let (waiting, _, preempted) = engine.queues();
            queued_sum += (waiting + preempted) as f64;
            continue;
        }
        for e in engine.step()? {
            match e {
                Event::Admitted { id } => {
                    admitted += 1;
                    delay_sum += (step - 1 - arrived_at.get(&id).copied().unwrap_or(0)) as f64;
                }
                Event::Finished { .. } => r.completed += 1,
                Event::Token { .. } => {}
            }
        }
        let (waiting, running, preempted) = engine.queues();
        let l = engine.cache().stats().ledger;
        let util = if l.used_blocks > 0 {
            l.stored_tokens as f64 / (l.used_blocks * bt) as f64
        } else {
            0.0
        };
        if l.used_blocks > 0 {
            util_sum += util;
            held_steps += 1;
        }
        running_sum += running as f64;
        queued_sum += (waiting + preempted) as f64;
        r.running_max = r.running_max.max(running);
        let held = l.used_blocks as u64 * stride;
        if held > r.peak_held_bytes {
            r.peak_held_bytes = held;
            r.utilization_peak = util;
        }
        if step.is_multiple_of(16) {
            r.series.push((step, util, running));
        }
    }
    let s = engine.stats();
    let l = engine.cache().stats().ledger;
    let steps = step.max(1) as f64;
    r.utilization_mean = util_sum / held_steps.max(1) as f64;
    r.running_mean = running_sum / steps;
    r.queued_mean = queued_sum / steps;
    r.preemptions = s.preemptions;
    r.queue_delay_mean_steps = delay_sum / admitted.max(1) as f64;
    r.steps = step;
    r.seconds = step as f64 * step_s;
    r.swap_bytes = l.swapped_blocks * geometry.block_bytes();
    r.recomputed_tokens = s.recomputed_tokens;
    let probes = l.prefix_hits + l.prefix_misses;
    r.prefix_hit_rate = (probes > 0).then(|| l.prefix_hits as f64 / probes as f64);
    Ok(r)
}
