//! The serving simulator: continuous batching over a request trace, one step at a time, with a
//! KV memory policy deciding who fits.
//!
//! Each step (`step_ms` of simulated time) every decoding request stores its last token and
//! generates one; prefilling requests compute their prompts in chunks from the step's token
//! budget (`step_tokens`, less the decode tokens); then preempted requests are resumed and new
//! ones admitted, first come first served, while the policy says they fit (a request that does not
//! fit stops the queue). When a running request cannot store its token, the most recently admitted
//! running request is preempted (swapped or dropped, as the policy does) and the store retried.
//! A dropped request is admitted again over its prompt and generated tokens and recomputes those
//! not found in a prefix cache, at the step budget's expense. Time: steps × `step_ms`, plus
//! `token_us` per prefilled or recomputed token, plus the swaps' bytes over `link_gbps`.

use std::collections::VecDeque;

use super::policy::{KvPolicy, Preempted};
use super::trace::Request;

/// Simulation settings.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// Simulated duration of one step, in milliseconds.
    pub step_ms: f64,
    /// Tokens one step computes (decode tokens plus prefill chunks).
    pub step_tokens: usize,
    /// Simulated microseconds each prefilled (or recomputed) token adds to its step.
    pub token_us: f64,
    /// Arrivals come this many times faster than in the trace.
    pub rate_scale: f64,
    /// Host link bandwidth for swaps, in GB/s.
    pub link_gbps: f64,
    /// Leading prompt tokens every request shares (a system prompt).
    pub shared_prefix: usize,
    /// Longest request (prompt + generated) served; longer ones are rejected by every policy.
    pub max_seq: usize,
}

/// One policy's results over a trace.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SimResult {
    /// The policy.
    pub policy: String,
    /// Time-averaged bytes holding tokens ÷ KV bytes held by running requests.
    pub utilization_mean: f64,
    /// The same ratio when the held bytes peak.
    pub utilization_peak: f64,
    /// Requests running (prefilling or decoding) per step, averaged over the run.
    pub running_mean: f64,
    /// Most requests running at once.
    pub running_max: usize,
    /// Requests waiting per step, averaged.
    pub queued_mean: f64,
    /// Preemptions.
    pub preemptions: u64,
    /// Requests completed.
    pub completed: usize,
    /// Requests longer than the maximum sequence length or the whole budget, never served.
    pub rejected: usize,
    /// Mean steps between a request's arrival and its first admission.
    pub queue_delay_mean_steps: f64,
    /// Steps until the last request completed.
    pub steps: u64,
    /// Simulated seconds (steps and swap transfers).
    pub seconds: f64,
    /// Bytes swapped out and in.
    pub swap_bytes: u64,
    /// Tokens computed again after preemption by recomputation.
    pub recomputed_tokens: u64,
    /// Peak KV bytes held by running requests.
    pub peak_held_bytes: u64,
    /// Tokens the budget holds at full utilization.
    pub capacity_tokens: u64,
    /// Prefix-cache hit rate (paged policies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate: Option<f64>,
    /// Per sampled step: (step, utilization, running).
    #[serde(skip)]
    pub series: Vec<(u64, f64, usize)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Prefill(usize),
    Decode,
    Swapped(Option<usize>),
    Done,
}

struct Live {
    phase: Phase,
    generated: usize,
    admitted: Option<u64>,
}

/// Prompt token `pos` of request `r`: shared ids for the system prompt, unique ids after it.
fn prompt_token(r: usize, pos: usize, shared: usize) -> u32 {
    if pos < shared {
        pos as u32
    } else {
        0x8000_0000 | ((r as u32) << 14 ^ pos as u32)
    }
}

/// Generated token `i` of request `r` (unique).
fn output_token(r: usize, i: usize) -> u32 {
    0x4000_0000 | ((r as u32) << 11 ^ i as u32)
}

/// Finishes `running[i]`: its memory goes back to the policy.
fn retire(policy: &mut dyn KvPolicy, live: &mut [Live], running: &mut Vec<usize>, i: usize) {
    let r = running.remove(i);
    policy.finish(r);
    live[r].phase = Phase::Done;
}

/// Runs `policy` over `requests`.
pub fn simulate(policy: &mut dyn KvPolicy, requests: &[Request], cfg: &SimConfig) -> SimResult {
    let step_s = cfg.step_ms / 1000.0;
    let arrival = |r: &Request| (r.arrival_s / cfg.rate_scale / step_s) as u64;
    let mut live: Vec<Live> = requests
        .iter()
        .map(|_| Live {
            phase: Phase::Waiting,
            generated: 0,
            admitted: None,
        })
        .collect();
    let mut res = SimResult {
        policy: policy.name().into(),
        capacity_tokens: policy.capacity_tokens(),
        ..SimResult::default()
    };
    let (mut waiting, mut preempted) = (VecDeque::new(), VecDeque::<usize>::new());
    let mut running: Vec<usize> = Vec::new();
    let (mut next, mut step, mut finished) = (0usize, 0u64, 0usize);
    let mut prefilled = 0u64;
    let lookahead = policy.lookahead();
    // Admissions that passed the request now first in the arrival queue.
    let mut head_passed = 0;
    let (mut util_sum, mut util_n, mut running_sum, mut queued_sum, mut delay_sum) =
        (0.0, 0u64, 0u64, 0u64, 0u64);
    let tokens_of = |r: usize, l: &Live| -> Vec<u32> {
        let p = requests[r].prompt;
        (0..p)
            .map(|i| prompt_token(r, i, cfg.shared_prefix))
            .chain((1..l.generated).map(|i| output_token(r, i)))
            .collect()
    };
    while finished < requests.len() {
        while next < requests.len() && arrival(&requests[next]) <= step {
            let total = requests[next].prompt + requests[next].generate;
            if total > cfg.max_seq || !policy.fits_alone(total - 1) {
                live[next].phase = Phase::Done;
                res.rejected += 1;
                finished += 1;
            } else {
                waiting.push_back(next);
            }
            next += 1;
        }
        let mut budget = cfg.step_tokens;
        // Decode: each decoding request stores its last token and generates the next.
        let mut i = 0;
        while i < running.len() {
            let r = running[i];
            if live[r].phase != Phase::Decode {
                i += 1;
                continue;
            }
            let token = output_token(r, live[r].generated);
            let mut stored = policy.append(r, token);
            while !stored {
                let Some(victim) = policy.victim(&running) else {
                    break;
                };
                let at = running
                    .iter()
                    .position(|&x| x == victim)
                    .unwrap_or(running.len() - 1);
                running.remove(at);
                if at < i {
                    i -= 1;
                }
                res.preemptions += 1;
                live[victim].phase = match policy.preempt(victim) {
                    Preempted::Swapped { bytes } => {
                        res.swap_bytes += bytes;
                        Phase::Swapped(match live[victim].phase {
                            Phase::Prefill(n) => Some(n),
                            _ => None,
                        })
                    }
                    Preempted::Dropped => Phase::Waiting,
                };
                preempted.push_back(victim);
                if victim == r {
                    break;
                }
                stored = policy.append(r, token);
            }
            if !stored {
                continue;
            }
            budget = budget.saturating_sub(1);
            live[r].generated += 1;
            if live[r].generated >= requests[r].generate {
                retire(policy, &mut live, &mut running, i);
                finished += 1;
                continue;
            }
            i += 1;
        }
        // Prefill: prompts in chunks from what the step has left.
        let mut i = 0;
        while i < running.len() {
            let r = running[i];
            if let Phase::Prefill(left) = live[r].phase {
                let chunk = left.min(budget);
                budget -= chunk;
                prefilled += chunk as u64;
                if chunk == left {
                    live[r].phase = Phase::Decode;
                    live[r].generated = live[r].generated.max(1);
                    if live[r].generated >= requests[r].generate {
                        retire(policy, &mut live, &mut running, i);
                        finished += 1;
                        continue;
                    }
                } else {
                    live[r].phase = Phase::Prefill(left - chunk);
                }
            }
            i += 1;
        }
        // Admission: preempted requests first, in order, the first that does not fit stopping
        // everything (new requests would take the memory it waits for); then arrivals in order,
        // where a request that does not fit stops the queue unless the policy lets later ones
        // within its look-ahead pass it (a bounded number of times per head).
        let mut admit = |r: usize, running: &mut Vec<usize>, res: &mut SimResult| {
            let phase = match live[r].phase {
                Phase::Swapped(prefill) => policy.resume(r, running).map(|bytes| {
                    res.swap_bytes += bytes;
                    prefill.map_or(Phase::Decode, Phase::Prefill)
                }),
                _ => {
                    let tokens = tokens_of(r, &live[r]);
                    let total = requests[r].prompt + requests[r].generate - 1;
                    policy.admit(r, &tokens, total, running).map(|cached| {
                        if live[r].admitted.is_some() {
                            res.recomputed_tokens += (tokens.len() - cached) as u64;
                        }
                        Phase::Prefill(tokens.len() - cached)
                    })
                }
            };
            let Some(phase) = phase else { return false };
            live[r].phase = phase;
            if live[r].admitted.is_none() {
                live[r].admitted = Some(step);
                delay_sum += step - arrival(&requests[r]);
            }
            running.push(r);
            true
        };
        while let Some(&r) = preempted.front() {
            if !admit(r, &mut running, &mut res) {
                break;
            }
            preempted.pop_front();
        }
        if preempted.is_empty() {
            let (window, passes) = lookahead;
            let mut k = 0;
            while k < waiting.len() && k <= window && (k == 0 || head_passed < passes) {
                let r = waiting[k];
                if admit(r, &mut running, &mut res) {
                    waiting.remove(k);
                    if k == 0 {
                        head_passed = 0;
                    } else {
                        head_passed += 1;
                    }
                } else {
                    k += 1;
                }
            }
        }
        let usage = policy.usage();
        let util = if usage.held_bytes > 0 {
            usage.token_bytes as f64 / usage.held_bytes as f64
        } else {
            1.0
        };
        if !running.is_empty() {
            util_sum += util;
            util_n += 1;
        }
        if usage.held_bytes > res.peak_held_bytes {
            res.peak_held_bytes = usage.held_bytes;
            res.utilization_peak = util;
        }
        running_sum += running.len() as u64;
        queued_sum += (waiting.len() + preempted.len()) as u64;
        res.running_max = res.running_max.max(running.len());
        res.series.push((step, util, running.len()));
        step += 1;
    }
    res.steps = step;
    res.completed = requests.len() - res.rejected;
    res.utilization_mean = if util_n > 0 {
        util_sum / util_n as f64
    } else {
        1.0
    };
    res.running_mean = running_sum as f64 / step.max(1) as f64;
    res.queued_mean = queued_sum as f64 / step.max(1) as f64;
    res.queue_delay_mean_steps = delay_sum as f64 / res.completed.max(1) as f64;
    res.seconds = step as f64 * step_s
        + prefilled as f64 * cfg.token_us / 1e6
        + res.swap_bytes as f64 / (cfg.link_gbps * 1e9);
    res.prefix_hit_rate = policy.prefix_hit_rate();
    res
}

#[cfg(test)]
mod tests;
