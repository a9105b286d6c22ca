//! The Llama decoder against an independent numpy implementation (`scripts/llama_reference.py`):
//! logits within 1e-4 at every one of 64 greedy steps (f32 KV) and 1e-3 (f16 KV, against the
//! reference with keys and values rounded to f16), of the row's largest logit, and the engine's
//! greedy tokens identical for 64 steps with every prompt batched together, chunked prefill,
//! tied embeddings, and a KV budget small enough to force preemption (swap and recompute).
//!
//! The reference needs python3 with numpy: `TENSORMEM_PYTHON`, else the virtual environment
//! `scripts/fetch_numpy.sh` makes in the cache, else `python3`. Without numpy the tests skip with
//! the reason (as the MiniLM tests do without their weights); `scripts/test.sh` provides it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tensormem::kv::{KvCache, KvCacheConfig, KvDType, Preemption, SeqId};
use tensormem::pool::{ReplayConfig, ReplayPool};
use tensormem::{HostBackend, HostConfig, Runtime, RuntimeConfig, WeightFormat};
use tensormem_examples::models::llama::{
    Chunk, Engine, EngineConfig, Event, Llama, Request, Sampling,
};

fn python() -> Option<PathBuf> {
    let cache = std::env::var_os("TENSORMEM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tensormem")));
    let candidates = std::env::var_os("TENSORMEM_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain(cache.map(|c| c.join("pyenv/bin/python")))
        .chain([PathBuf::from("python3")]);
    for p in candidates {
        let ok = Command::new(&p)
            .args(["-c", "import numpy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(p);
        }
    }
    None
}

/// The checkpoint and its reference, written once per process and variant (the tests run in
/// parallel and share it read-only); `None` (skip) without numpy.
fn checkpoint(tied: bool) -> Option<(PathBuf, Value)> {
    static MADE: [OnceLock<Option<(PathBuf, Value)>>; 2] = [OnceLock::new(), OnceLock::new()];
    MADE[usize::from(tied)]
        .get_or_init(|| write_checkpoint(tied))
        .clone()
}

/// Writes the checkpoint and its reference into a fresh directory.
fn write_checkpoint(tied: bool) -> Option<(PathBuf, Value)> {
    let Some(py) = python() else {
        eprintln!("skipping: no python3 with numpy (run scripts/fetch_numpy.sh)");
        return None;
    };
    let dir = std::env::temp_dir().join(format!(
        "tensormem-llama-{}-{}",
        std::process::id(),
        if tied { "tied" } else { "untied" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/llama_reference.py");
    let mut cmd = Command::new(py);
    cmd.arg(script).arg(&dir);
    if tied {
        cmd.arg("--tied");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    Some((dir, reference))
}

fn host() -> Runtime {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    Runtime::new(backend, RuntimeConfig::default()).unwrap()
}

/// A host runtime whose device pool records and replays steps.
fn host_replay() -> (Runtime, Arc<ReplayPool>) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    Runtime::with_replay_pool(backend, RuntimeConfig::default(), ReplayConfig::default()).unwrap()
}

/// The chunk of a whole prompt of sequence `seq`, its last logits wanted.
fn prompt_chunk(seq: SeqId, tokens: Vec<u32>) -> Chunk {
    Chunk {
        seq,
        start: 0,
        tokens,
        logits: true,
    }
}

/// Appends `next` to `chunk`'s sequence in `kv`; the one-token chunk that follows `chunk`.
fn advance(kv: &mut KvCache, chunk: &Chunk, next: u32) -> Chunk {
    kv.append(chunk.seq, next).unwrap();
    Chunk {
        seq: chunk.seq,
        start: chunk.start + chunk.tokens.len(),
        tokens: vec![next],
        logits: true,
    }
}

fn cache(model: &Llama, dtype: KvDType, block: u32, budget: u64, how: Preemption) -> KvCache {
    let geometry = model.kv_geometry(dtype, block).unwrap();
    KvCache::new(
        &model.decoder.rt,
        KvCacheConfig {
            geometry,
            budget,
            preemption: how,
        },
    )
    .unwrap()
}

/// The elements of a JSON array, each read by `f`.
fn array<T>(v: &Value, f: impl Fn(&Value) -> T) -> Vec<T> {
    v.as_array().unwrap().iter().map(f).collect()
}

/// A row of reference logits.
fn f64s(v: &Value) -> Vec<f64> {
    array(v, |x| x.as_f64().unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    array(v, |x| x.as_u64().unwrap() as u32)
}

/// Prefill then 64 decode steps fed the reference's tokens; every step's logits compared.
fn logits_match(dtype: KvDType, key: &str, tol: f64) {
    let Some((dir, reference)) = checkpoint(false) else {
        return;
    };
    let rt = host();
    let model = Llama::load(&rt, &dir, WeightFormat::F32).unwrap();
    for case in reference["cases"].as_array().unwrap() {
        assert!(
            case["min_margin"].as_f64().unwrap() > 1e-3,
            "reference margins too thin"
        );
        let prompt = ids(&case["ids"]);
        assert_eq!(
            model.encode(case["prompt"].as_str().unwrap()).unwrap(),
            prompt
        );
        let tokens = ids(&case["tokens"]);
        let mut kv = cache(&model, dtype, 4, 1 << 20, Preemption::Swap);
        let seq = kv.admit(&prompt, 0).unwrap().seq;
        let mut chunk = prompt_chunk(seq, prompt.clone());
        for (step, want) in case[key].as_array().unwrap().iter().enumerate() {
            let got = model
                .decoder
                .forward(&kv, std::slice::from_ref(&chunk))
                .unwrap();
            let want = f64s(want);
            // Relative to the row's largest logit: an f16 key the f32 path rounds the other way
            // at a half-ulp tie moves a small logit by about that much.
            let scale = want.iter().fold(1f64, |m, w| m.max(w.abs()));
            for (j, (g, &w)) in got[0].iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() <= tol * scale,
                    "{:?} step {step} logit {j}: {g} vs {w}",
                    case["prompt"]
                );
            }
            chunk = advance(&mut kv, &chunk, tokens[step]);
        }
        kv.release().unwrap();
    }
    model.decoder.weights.release(&rt).unwrap();
    rt.check_leaks().unwrap();
}

#[test]
fn logits_match_numpy_for_64_steps_f32_kv() {
    logits_match(KvDType::F32, "logits", 1e-4);
}

#[test]
fn logits_match_numpy_for_64_steps_f16_kv() {
    logits_match(KvDType::F16, "logits_f16_kv", 1e-3);
}

/// Every prompt at once through the engine; the tokens of each must equal the reference's.
fn engine_tokens(tied: bool, step_tokens: usize, budget: u64, how: Preemption) -> u64 {
    let Some((dir, reference)) = checkpoint(tied) else {
        return 0;
    };
    // Steps through a record-and-replay pool: planned offsets must not change a token.
    let (rt, replay) = host_replay();
    let mut model = Llama::load(&rt, &dir, WeightFormat::F32).unwrap();
    model.decoder.replay = Some(replay.clone());
    let mut kv = cache(&model, KvDType::F32, 4, budget, how);
    let cases = reference["cases"].as_array().unwrap();
    let mut engine = Engine::new(
        &model.decoder,
        &mut kv,
        budget,
        how,
        EngineConfig {
            step_tokens,
            salt: 0,
        },
    );
    for case in cases {
        engine
            .add(Request {
                prompt: ids(&case["ids"]),
                max_new_tokens: 64,
                sampling: Sampling::default(),
                stop: Vec::new(),
            })
            .unwrap();
    }
    let mut got = vec![Vec::new(); cases.len()];
    let mut finished = 0;
    while !engine.is_idle() {
        for e in engine.step().unwrap() {
            match e {
                Event::Token { id, token } => got[id].push(token),
                Event::Finished { .. } => finished += 1,
                Event::Admitted { .. } => {}
            }
        }
    }
    assert_eq!(finished, cases.len());
    for (case, got) in cases.iter().zip(&got) {
        assert_eq!(got, &ids(&case["tokens"]), "{:?}", case["prompt"]);
    }
    let preemptions = engine.stats().preemptions;
    drop(engine);
    let r = replay.replay_stats();
    assert!(r.planned > r.dynamic, "steps replayed their plans: {r:?}");
    assert_eq!(kv.stats().ledger.sequences, 0);
    kv.release().unwrap();
    model.decoder.weights.release(&rt).unwrap();
    rt.check_leaks().unwrap();
    preemptions
}

#[test]
fn batched_engine_tokens_match_numpy() {
    engine_tokens(false, 256, 1 << 20, Preemption::Swap);
}

#[test]
fn chunked_prefill_and_tied_embeddings_tokens_match_numpy() {
    engine_tokens(true, 7, 1 << 20, Preemption::Swap);
}

#[test]
fn preempted_requests_still_generate_the_reference_tokens() {
    // 40 blocks of 4 tokens for three sequences that reach 18, 17 and 24 blocks.
    let Some((dir, _)) = checkpoint(false) else {
        return;
    };
    let rt = host();
    let model = Llama::load(&rt, &dir, WeightFormat::F32).unwrap();
    let g = model.kv_geometry(KvDType::F32, 4).unwrap();
    let budget = g.block_bytes().next_multiple_of(64) * 40;
    model.decoder.weights.release(&rt).unwrap();
    for how in [Preemption::Swap, Preemption::Recompute] {
        let n = engine_tokens(false, 64, budget, how);
        assert!(n > 0, "{how:?}: the budget was meant to force a preemption");
    }
}

/// SmolLM2-135M-Instruct (`scripts/fetch_smollm2.sh`): the tokenizer's ids, the first step's
/// logits and 20 greedy tokens equal the numpy reference the fetch wrote. Skips without the cache.
#[test]
fn smollm2_generates_its_numpy_reference() {
    let cache = std::env::var_os("TENSORMEM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tensormem")))
        .unwrap()
        .join("smollm2");
    let Ok(text) = std::fs::read(cache.join("reference.json")) else {
        eprintln!("skipping: no SmolLM2 cache (run scripts/fetch_smollm2.sh)");
        return;
    };
    let reference: Value = serde_json::from_slice(&text).unwrap();
    let rt = host();
    let model = Llama::load(&rt, &cache, WeightFormat::F32).unwrap();
    let prompt = model.encode(reference["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(prompt, ids(&reference["ids"]));
    let mut kv = cache_of(&model, 1 << 26);
    let seq = kv.admit(&prompt, 0).unwrap().seq;
    let mut chunk = prompt_chunk(seq, prompt);
    let want = ids(&reference["tokens"]);
    for (step, &next) in want.iter().enumerate() {
        let logits = model
            .decoder
            .forward(&kv, std::slice::from_ref(&chunk))
            .unwrap();
        if step == 0 {
            for (g, w) in logits[0]
                .iter()
                .zip(reference["first_logits"].as_array().unwrap())
            {
                let w = w.as_f64().unwrap();
                assert!((f64::from(*g) - w).abs() < 1e-3, "first logits: {g} vs {w}");
            }
        }
        let got =
            tensormem_examples::models::llama::Sampler::new(Sampling::default()).sample(&logits[0]);
        assert_eq!(got, next, "step {step}");
        chunk = advance(&mut kv, &chunk, next);
    }
    assert_eq!(
        model.decode(&want).unwrap(),
        reference["text"].as_str().unwrap()
    );
    kv.release().unwrap();
    model.decoder.weights.release(&rt).unwrap();
}

fn cache_of(model: &Llama, budget: u64) -> KvCache {
    cache(model, KvDType::F32, 0, budget, Preemption::Swap)
}

#[path = "support/backends.rs"]
mod backends;

/// Adds every reference case as a greedy 64-token request, then runs `step` until the engine is
/// idle; each request's generated tokens.
fn generate_all(
    engine: &mut Engine<'_>,
    cases: &[Value],
    step: impl Fn(&mut Engine<'_>) -> tensormem::Result<Vec<Event>>,
) -> Vec<Vec<u32>> {
    for case in cases {
        let request = Request {
            prompt: ids(&case["ids"]),
            max_new_tokens: 64,
            sampling: Sampling::default(),
            stop: Vec::new(),
        };
        engine.add(request).unwrap();
    }
    let mut tokens = vec![Vec::new(); cases.len()];
    while !engine.is_idle() {
        for e in step(engine).unwrap() {
            if let Event::Token { id, token } = e {
                tokens[id].push(token);
            }
        }
    }
    tokens
}

/// Every backend here (host, and Vulkan and wgpu on lavapipe): the engine's batched greedy
/// tokens equal numpy's for 64 steps, and the first step's logits are within 1e-4.
#[test]
fn every_backend_generates_the_reference_tokens() {
    let Some((dir, reference)) = checkpoint(false) else {
        return;
    };
    let cases = reference["cases"].as_array().unwrap();
    for (name, rt) in backends::available_runtimes() {
        let model = Llama::load(&rt, &dir, WeightFormat::F32).unwrap();
        let budget = 1 << 20;
        let mut kv = cache(&model, KvDType::F32, 4, budget, Preemption::Swap);
        let seq = kv.admit(&ids(&cases[0]["ids"]), 1).unwrap().seq;
        let chunk = prompt_chunk(seq, ids(&cases[0]["ids"]));
        let got = model.decoder.forward(&kv, &[chunk]).unwrap();
        let want = f64s(&cases[0]["logits"][0]);
        let scale = want.iter().fold(1f64, |m, w| m.max(w.abs()));
        for (g, w) in got[0].iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * scale,
                "{name}: logit {g} vs {w}"
            );
        }
        kv.free(seq).unwrap();
        let config = EngineConfig {
            step_tokens: 16,
            salt: 0,
        };
        let mut engine = Engine::new(&model.decoder, &mut kv, budget, Preemption::Swap, config);
        let tokens = generate_all(&mut engine, cases, |e| e.step());
        drop(engine);
        for (case, got) in cases.iter().zip(&tokens) {
            assert_eq!(got, &ids(&case["tokens"]), "{name}: {:?}", case["prompt"]);
        }
        println!("{name}: {} prompts x 64 tokens equal numpy's", cases.len());
        kv.release().unwrap();
        model.decoder.weights.release(&rt).unwrap();
    }
}

/// The browser's path, natively: the model loaded from its files' contents and every step
/// awaited ([`Llama::load_async`], [`Engine::step_async`], driven here by `pollster`), on every
/// backend, with a budget that forces preemption by recomputation (the only kind wasm32 has):
/// the tokens equal numpy's.
#[test]
fn the_awaitable_path_generates_the_reference_tokens() {
    let Some((dir, reference)) = checkpoint(false) else {
        return;
    };
    let cases = reference["cases"].as_array().unwrap();
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    for (name, rt) in backends::available_runtimes() {
        let file = tensormem_examples::models::weights::WeightFile::from_bytes(
            Path::new("model.safetensors"),
            read("model.safetensors"),
        )
        .unwrap();
        let config = String::from_utf8(read("config.json")).unwrap();
        let model = pollster::block_on(Llama::load_async(
            &rt,
            &config,
            &read("tokenizer.json"),
            file,
            WeightFormat::F32,
        ))
        .unwrap();
        let g = model.kv_geometry(KvDType::F32, 4).unwrap();
        let budget = g.block_bytes().next_multiple_of(64) * 40;
        let mut kv = cache(&model, KvDType::F32, 4, budget, Preemption::Recompute);
        let config = EngineConfig {
            step_tokens: 16,
            salt: 0,
        };
        let mut engine = Engine::new(
            &model.decoder,
            &mut kv,
            budget,
            Preemption::Recompute,
            config,
        );
        let tokens = generate_all(&mut engine, cases, |e| pollster::block_on(e.step_async()));
        let preemptions = engine.stats().preemptions;
        drop(engine);
        assert!(preemptions > 0, "{name}: the budget was meant to preempt");
        for (case, got) in cases.iter().zip(&tokens) {
            assert_eq!(got, &ids(&case["tokens"]), "{name}: {:?}", case["prompt"]);
        }
        kv.release().unwrap();
        model.decoder.weights.release(&rt).unwrap();
        rt.check_leaks().unwrap();
    }
}
