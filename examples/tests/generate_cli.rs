//! `generate` as a user runs it: `--help`, streaming and `--json`, and the refusals of bad input
//! (missing or corrupt weights and tokenizer, an unsupported config, a prompt past the context,
//! `--max-new-tokens 0`, a KV budget below one sequence) with exit code 1 or 2 and a message that
//! names the problem. Models are synthetic (`Synthetic::TINY`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tensormem_examples::models::llama::synthetic::Synthetic;

#[path = "support/run.rs"]
mod run;
use run::{assert_help_lists, json_ok, stderr};

const GENERATE: &str = env!("CARGO_BIN_EXE_generate");

fn model(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensormem-gen-{}-{name}", std::process::id()));
    Synthetic::TINY.write(&dir, 7).unwrap();
    dir
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(GENERATE)
        .arg("--model-dir")
        .arg(dir)
        .args(["--backend", "host"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_flags() {
    assert_help_lists(
        GENERATE,
        &[
            "--model-dir",
            "--max-new-tokens",
            "--backend",
            "--weights",
            "--kv-dtype",
            "--kv-budget",
            "--seed",
            "--json",
            "--temperature",
            "--top-k",
            "--top-p",
            "Exit status",
        ],
    );
}

#[test]
fn streams_text_and_reports_in_json() {
    let dir = model("ok");
    let o = run(&dir, &["w1 w2 w3", "--max-new-tokens", "5", "--ignore-eos"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = run::stdout(&o);
    assert!(out.starts_with("w1 w2 w3"), "{out}");
    for section in ["kv cache", "prefix cache", "decode", "tokens/s"] {
        assert!(out.contains(section), "no {section}: {out}");
    }
    let o = run(
        &dir,
        &[
            "w1 w2 w3",
            "w4",
            "--max-new-tokens",
            "6",
            "--ignore-eos",
            "--json",
        ],
    );
    let v = json_ok(&o);
    let outputs = v["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2);
    for out in outputs {
        assert_eq!(out["tokens"].as_array().unwrap().len(), 6);
        assert_eq!(out["finish"], "length");
    }
    assert_eq!(
        v["timings"]["decode_tokens"], 10,
        "two prompts, 5 decode steps after the first token each"
    );
    assert!(v["report"]["kv"]["blocks"].as_u64().unwrap() > 0);
    // The device held at least weights + KV + the activations' lower bound (the bound is one),
    // and at most 1.05 times that (issue 43's target; the pools' allowance is 1/32).
    let peak = v["report"]["device_peak_bytes"].as_u64().unwrap();
    let bound = v["report"]["device_bound_bytes"].as_u64().unwrap();
    assert!(peak >= bound, "peak {peak} below the bound {bound}");
    assert!(
        peak as f64 <= 1.05 * bound as f64,
        "peak {peak} above 1.05 x the bound {bound}"
    );
    // Same seed, same tokens; the greedy output does not depend on the batch.
    let alone = run(
        &dir,
        &["w4", "--max-new-tokens", "6", "--ignore-eos", "--json"],
    );
    let alone: Value = serde_json::from_slice(&alone.stdout).unwrap();
    assert_eq!(alone["outputs"][0]["tokens"], outputs[1]["tokens"]);
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let dir = model("bad");
    let cases: Vec<(&str, Vec<&str>, i32, &str)> = vec![
        (
            "zero tokens",
            vec!["w1", "--max-new-tokens", "0"],
            2,
            "max-new-tokens",
        ),
        (
            "long prompt",
            vec![&LONG, "--max-new-tokens", "4"],
            1,
            "context",
        ),
        (
            "tiny budget",
            vec!["w1 w2", "--kv-budget", "64B"],
            1,
            "budget",
        ),
        ("bad dtype", vec!["w1", "--kv-dtype", "f8"], 2, "f8"),
    ];
    for (what, args, code, word) in cases {
        let o = run(&dir, &args);
        assert_eq!(o.status.code(), Some(code), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains(word), "{what}: {}", stderr(&o));
    }
}

static LONG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| vec!["w5"; 200].join(" "));

#[test]
fn broken_model_directories_are_refused_by_name() {
    let breakers: Vec<(&str, Breaker, &str)> = vec![
        (
            "no weights",
            Box::new(|d: &Path| std::fs::remove_file(d.join("model.safetensors")).unwrap()),
            "model.safetensors",
        ),
        (
            "corrupt weights",
            Box::new(|d: &Path| {
                std::fs::write(d.join("model.safetensors"), b"\x10\0\0\0\0\0\0\0{not json").unwrap()
            }),
            "model.safetensors",
        ),
        (
            "truncated weights",
            Box::new(|d: &Path| {
                let p = d.join("model.safetensors");
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..b.len() / 2]).unwrap();
            }),
            "model.safetensors",
        ),
        (
            "no tokenizer",
            Box::new(|d: &Path| std::fs::remove_file(d.join("tokenizer.json")).unwrap()),
            "tokenizer",
        ),
        (
            "corrupt tokenizer",
            Box::new(|d: &Path| std::fs::write(d.join("tokenizer.json"), "{").unwrap()),
            "tokenizer",
        ),
        (
            "rope scaling",
            Box::new(|d: &Path| {
                edit_config(d, "rope_scaling", r#"{"type": "dynamic", "factor": 2.0}"#)
            }),
            "rope_scaling",
        ),
        (
            "gelu",
            Box::new(|d: &Path| edit_config(d, "hidden_act", r#""gelu""#)),
            "hidden_act",
        ),
        (
            "wrong shape",
            Box::new(|d: &Path| edit_config(d, "intermediate_size", "65")),
            "mlp",
        ),
    ];
    for (what, breaker, word) in breakers {
        let dir = model(&what.replace(' ', "-"));
        breaker(&dir);
        let o = run(&dir, &["w1", "--max-new-tokens", "2"]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains(word), "{what}: {}", stderr(&o));
    }
}

/// Damages a model directory.
type Breaker = Box<dyn Fn(&Path)>;

fn edit_config(dir: &Path, key: &str, value: &str) {
    let p = dir.join("config.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v[key] = serde_json::from_str(value).unwrap();
    std::fs::write(&p, v.to_string()).unwrap();
}

#[test]
fn serve_replays_a_trace_beside_the_simulator() {
    let dir = model("serve");
    let trace = dir.join("trace.csv");
    let mut csv = String::from("TIMESTAMP,ContextTokens,GeneratedTokens\n");
    for i in 0..12 {
        csv.push_str(&format!(
            "2023-11-16 18:15:{:02}.0000000,{},{}\n",
            i,
            20 + i * 7,
            5 + i
        ));
    }
    std::fs::write(&trace, csv).unwrap();
    let o = run(
        &dir,
        &[
            "--serve",
            trace.to_str().unwrap(),
            "--json",
            "--kv-budget",
            "64KiB",
            "--block",
            "4",
        ],
    );
    let v = json_ok(&o);
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies[0]["policy"], "engine");
    assert_eq!(policies[1]["policy"], "simulator");
    for p in policies {
        assert_eq!(p["completed"], 12, "{p}");
    }
    assert!(v["engine"]["decode_tokens"].as_u64().unwrap() > 0);
    let bad = run(
        &dir,
        &["--serve", dir.join("missing.csv").to_str().unwrap()],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("missing.csv"), "{}", stderr(&bad));
}

#[test]
fn a_refused_checkpoint_leaves_nothing_allocated() {
    use std::sync::Arc;
    use tensormem::{HostBackend, HostConfig, Runtime, RuntimeConfig, WeightFormat};
    use tensormem_examples::models::llama::Llama;
    let dir = model("leak");
    // Wrong MLP width: the norms and attention matrices of layer 0 upload before it is found.
    edit_config(&dir, "intermediate_size", "65");
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    for format in [WeightFormat::F32, WeightFormat::Int8 { group: 0 }] {
        let e = Llama::load(&rt, &dir, format).err().expect("refused");
        assert!(e.to_string().contains("mlp"), "{e}");
        rt.synchronize().unwrap();
        rt.check_leaks().unwrap();
        assert_eq!(rt.weights().report().tensors, 0);
    }
}

#[test]
fn a_device_budget_below_the_weights_spills_and_keeps_the_tokens() {
    let dir = model("budget");
    let args = [
        "w1 w2 w3 w9",
        "--max-new-tokens",
        "8",
        "--ignore-eos",
        "--json",
        "--kv-budget",
        "16KiB",
        "--block",
        "4",
    ];
    let free = run(&dir, &args);
    let free = json_ok(&free);
    let weights = free["report"]["weight_bytes"].as_u64().unwrap();
    let budget = format!("{}B", weights / 2);
    let tight = run(&dir, &[&args[..], &["--device-budget", &budget]].concat());
    let tight = json_ok(&tight);
    assert_eq!(tight["outputs"][0]["tokens"], free["outputs"][0]["tokens"]);
    let spills = tight["report"]["device_budget"]["spills"].as_u64().unwrap();
    assert!(
        spills > 0,
        "half the weights' bytes must spill: {}",
        tight["report"]
    );
    let pct = run(&dir, &["w1", "--device-budget", "50%"]);
    assert_eq!(pct.status.code(), Some(1));
    assert!(stderr(&pct).contains("percentage"), "{}", stderr(&pct));
}
