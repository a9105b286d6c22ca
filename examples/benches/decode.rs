//! Decode time per token of the Llama decoder on the host backend, paged KV cache against the
//! same engine with a contiguous one, at batch 1, 8 and 32, interleaved in one run.
//!
//! The model has SmolLM2-135M's shape with synthetic weights (`Synthetic::SMOLLM2_135M`, f32).
//! Each sequence holds a 128-token prompt (prefilled untimed), then 16 decode steps are timed.
//! "Paged" uses the device's default block (8 tokens on the host); "contiguous" gives every
//! sequence one block of 256 tokens, a region as long as the request can grow, so attention
//! reads each sequence's keys and values from one contiguous run (no table indirection across
//! blocks). The ratio is the median over the rounds of paged ÷ contiguous; the two alternate
//! which runs first in a round.
//!
//! Run: `cargo bench -p tensormem-examples --bench decode` (on a quiet machine).

#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark driver: a failure aborts the run"
)]

use std::sync::Arc;
use std::time::Instant;

use tensormem::kv::{KvCache, KvCacheConfig, KvDType, Preemption};
use tensormem::{HostBackend, HostConfig, Runtime, RuntimeConfig, WeightFormat};
use tensormem_examples::models::llama::synthetic::Synthetic;
use tensormem_examples::models::llama::{Chunk, Llama};

const PROMPT: usize = 128;
const STEPS: usize = 16;
const ROUNDS: usize = 5;

/// Seconds per decode step of `batch` sequences with `block` tokens per block.
fn decode_step_secs(model: &Llama, batch: usize, block: u32) -> f64 {
    let geometry = model.kv_geometry(KvDType::F32, block).unwrap();
    let budget = geometry.block_bytes().next_multiple_of(256)
        * (batch * (PROMPT + STEPS + 1).div_ceil(block as usize)) as u64
        * 2;
    let config = KvCacheConfig {
        geometry,
        budget,
        preemption: Preemption::Swap,
    };
    let mut kv = KvCache::new(&model.decoder.rt, config).unwrap();
    let mut chunks = Vec::new();
    for b in 0..batch {
        let prompt: Vec<u32> = (0..PROMPT)
            .map(|i| (3 + (i * 31 + b * 7) % 4000) as u32)
            .collect();
        let seq = kv.admit(&prompt, b as u64).unwrap().seq;
        chunks.push(Chunk {
            seq,
            start: 0,
            tokens: prompt,
            logits: true,
        });
    }
    model.decoder.forward(&kv, &chunks).unwrap();
    let mut total = 0.0;
    for step in 0..STEPS {
        for c in &mut chunks {
            let token = (5 + step) as u32;
            kv.append(c.seq, token).unwrap();
            c.start += c.tokens.len();
            c.tokens = vec![token];
        }
        let t = Instant::now();
        let logits = model.decoder.forward(&kv, &chunks).unwrap();
        total += t.elapsed().as_secs_f64();
        assert_eq!(logits.len(), batch);
    }
    kv.release().unwrap();
    total / STEPS as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("tensormem-bench-smollm2-{}", std::process::id()));
    Synthetic::SMOLLM2_135M.write(&dir, 1).unwrap();
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    let model = Llama::load(&rt, &dir, WeightFormat::F32).unwrap();
    let paged_block = model.kv_geometry(KvDType::F32, 0).unwrap().block_tokens;
    println!(
        "decode, SmolLM2-135M shape (synthetic f32 weights), host backend, prompt {PROMPT}, \
         {STEPS} steps, {ROUNDS} rounds interleaved; load average {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:>6} {:>22} {:>22} {:>8}",
        "batch", "paged ms/token", "contiguous ms/token", "ratio"
    );
    for batch in [1usize, 8, 32] {
        let (mut paged, mut contiguous, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            // Each layout goes first in every other round, so neither always runs on a warmer
            // (or a busier) machine.
            let time = |block| decode_step_secs(&model, batch, block) / batch as f64;
            let (p, c) = if round % 2 == 0 {
                let p = time(paged_block);
                (p, time(256))
            } else {
                let c = time(256);
                (time(paged_block), c)
            };
            ratio.push(p / c);
            paged.push(p);
            contiguous.push(c);
        }
        println!(
            "{batch:>6} {:>22.3} {:>22.3} {:>8.3}",
            median(&mut paged) * 1e3,
            median(&mut contiguous) * 1e3,
            median(&mut ratio)
        );
    }
    model.decoder.weights.release(&rt).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
