//! The sample executables as a user runs them: `--help`/`--version`, exit codes (0 success, 1
//! failure while running, 2 usage), image inputs, refusals of bad files and bad models, and the
//! backend selection in `--json`. MiniLM cases need the model cache (`scripts/fetch_minilm.sh`)
//! and print why they are skipped without it. Unix only: the cases use FIFOs, `/dev/zero` and
//! symlinks.

#![cfg(unix)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tensormem_examples::models::mnist::assets_dir;

#[path = "support/minilm_cache.rs"]
mod minilm_cache;
#[path = "support/run.rs"]
mod run;
#[path = "support/scratch.rs"]
mod scratch;
use run::{assert_help_lists, assert_version, json_ok as json, run, stderr};
use scratch::Scratch;

const MNIST: &str = env!("CARGO_BIN_EXE_mnist");
const MINILM: &str = env!("CARGO_BIN_EXE_minilm");

fn asset(name: &str) -> String {
    assets_dir().join(name).display().to_string()
}

/// MNIST on the host backend, one run, with `args` after those: its `--json` report.
fn mnist_host_json(args: &[&str]) -> Value {
    json(&run(
        MNIST,
        &[&["--backend", "host", "--json", "--runs", "1"][..], args].concat(),
    ))
}

fn minilm_dir() -> Option<PathBuf> {
    minilm_cache::model_dir("minilm CLI cases")
}

#[test]
fn help_version_and_usage_errors_are_standard() {
    for bin in [MNIST, MINILM] {
        assert_help_lists(
            bin,
            &[
                "--backend",
                "--timeout",
                "--json",
                "--runs",
                "--version",
                "Exit status:",
            ],
        );
        assert_version(bin);
        for bad in [
            &["--bogus"][..],
            &["--runs", "0"],
            &["--timeout", "-1"],
            &["--backend", "lavapipe"],
        ] {
            let o = run(bin, bad);
            assert_eq!(o.status.code(), Some(2), "{bin} {bad:?}: {}", stderr(&o));
        }
    }
}

#[test]
fn mnist_reads_png_jpeg_and_colour_photos() {
    let j = mnist_host_json(&[
        &asset("mnist_test_0_label_7.png"),
        &asset("mnist_test_0_label_7.jpg"),
    ]);
    let preds: Vec<u64> = j["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["prediction"].as_u64().unwrap())
        .collect();
    assert_eq!(preds, [7, 7]);
    // The PNG is lossless: the reference logits of the first MNIST test image.
    let l0 = j["images"][0]["logits"][7].as_f64().unwrap();
    assert!((l0 - 30.491).abs() < 1e-3, "{l0}");
    // Issue 14: the device pool's peak reserved over peak live, and the two bytes it divides.
    let r = &j["report"];
    let (reserved, live) = (
        r["peak_device_bytes"].as_u64().unwrap(),
        r["peak_device_live_bytes"].as_u64().unwrap(),
    );
    let ratio = r["peak_device_reserved_over_live"].as_f64().unwrap();
    assert!(live > 0 && reserved >= live, "{r}");
    assert!((ratio - reserved as f64 / live as f64).abs() < 1e-9, "{r}");

    let photo = asset("photo_label_7_dark_on_light.png");
    assert_eq!(
        mnist_host_json(&["--invert", &photo])["images"][0]["prediction"],
        7
    );
    let o = run(MNIST, &["--backend", "host", "--runs", "1", &photo]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("try --invert"), "{}", stderr(&o));
}

/// Regression for issue 18: `/dev/zero` grew until memory ran out, a FIFO blocked forever, a
/// 100 MB file was read in full before its size was checked.
#[test]
fn mnist_refuses_bad_files_with_exit_1() {
    let d = Scratch::new("cli-bad-files");
    let big = d.join("big.png");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100_000_000)
        .unwrap();
    let mut cases = vec![
        (big.display().to_string(), "bytes is over"),
        ("/nonexistent/x.png".to_string(), "x.png"),
    ];
    if Path::new("/dev/zero").exists() {
        cases.push(("/dev/zero".into(), "a character device"));
    }
    let fifo = d.join("fifo");
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        cases.push((fifo.display().to_string(), "a FIFO"));
    }
    for (path, message) in cases {
        let o = run(MNIST, &["--backend", "host", "--runs", "1", &path]);
        assert_eq!(o.status.code(), Some(1), "{path}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.starts_with("mnist: ") && err.contains(message),
            "{path}: {err}"
        );
    }
}

/// Regression for issue 18: `auto` picked lavapipe (4.1 s per MiniLM inference) over the host
/// backend (0.1 s). Whatever this machine has, `auto` never runs on a software GPU, and the JSON
/// says why every other backend was passed over.
#[test]
fn auto_never_picks_a_software_gpu_and_says_why() {
    let o = run(MNIST, &["--json", "--runs", "1"]);
    let sel = &json(&o)["report"]["backend_selection"];
    assert_eq!(sel["requested"], "auto");
    assert_ne!(sel["device_type"], "software GPU", "{sel}");
    let passed = sel["passed_over"].as_array().unwrap();
    let chosen = sel["backend"].as_str().unwrap();
    for name in ["cuda", "vulkan", "wgpu"] {
        if name != chosen {
            let entry = passed.iter().find(|p| p["backend"] == name);
            let reason = entry.and_then(|p| p["reason"].as_str()).unwrap_or("");
            assert!(!reason.is_empty(), "{name} has no reason in {sel}");
        }
    }
    for p in passed {
        if p["device_type"] == "software GPU" {
            assert!(
                p["reason"]
                    .as_str()
                    .unwrap()
                    .contains("software implementation")
            );
        }
    }
    // Where the staging pools' host memory lives (issue 20): the host backend binds nothing
    // unless configured, and says so.
    let host_memory = &json(&o)["report"]["host_placement"];
    if chosen == "host" {
        assert_eq!(host_memory["policy"], "none", "{host_memory}");
        assert!(host_memory["numa_node"].is_null());
    }
    assert!(
        ["bound", "driver", "none"].contains(&host_memory["policy"].as_str().unwrap()),
        "{host_memory}"
    );
    let text = run(MNIST, &["--runs", "1"]);
    let stdout = run::stdout(&text);
    assert!(
        stdout.contains(&format!("backend {chosen} on ")),
        "{stdout}"
    );
    assert!(stdout.contains("host memory placement        "), "{stdout}");
}

/// A model directory whose files link to the cached ones, with `config.json` edited by `edit`.
fn model_with_config(src: &Path, name: &str, edit: impl Fn(&mut Value)) -> Scratch {
    let d = Scratch::new(&format!("cli-{name}"));
    for f in ["model.safetensors", "tokenizer.json"] {
        std::os::unix::fs::symlink(src.join(f), d.join(f)).unwrap();
    }
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    d.write("config.json", cfg.to_string());
    d
}

fn minilm_fails(dir: &Path, message: &str) {
    let o = run(
        MINILM,
        &[
            "--backend",
            "host",
            "--runs",
            "1",
            "--model-dir",
            dir.to_str().unwrap(),
            "A man is eating food.",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "nothing printed on stdout on failure");
    let err = stderr(&o);
    assert!(err.contains(message), "expected {message:?} in {err}");
}

/// Regression for issue 18: a negative `layer_norm_eps` exited 0 with `null` embeddings, and a
/// config with fewer layers than the weights ran and ignored the rest.
#[test]
fn minilm_refuses_configs_that_disagree_with_the_weights() {
    let Some(src) = minilm_dir() else { return };
    let d = model_with_config(&src, "eps", |c| c["layer_norm_eps"] = (-1e-12).into());
    minilm_fails(&d, "layer_norm_eps");
    let d = model_with_config(&src, "layers", |c| c["num_hidden_layers"] = 5.into());
    minilm_fails(
        &d,
        "the weights hold 6 encoder layers but config.json says num_hidden_layers = 5",
    );
    let d = model_with_config(&src, "hidden", |c| c["intermediate_size"] = 1024.into());
    minilm_fails(&d, "intermediate.dense.weight");
}

/// Regression for issue 18: NaN weights exited 0 and printed `null` embeddings.
#[test]
fn minilm_refuses_non_finite_weights() {
    let Some(src) = minilm_dir() else { return };
    let d = Scratch::new("cli-nan");
    for f in ["config.json", "tokenizer.json"] {
        std::os::unix::fs::symlink(src.join(f), d.join(f)).unwrap();
    }
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let name = "encoder.layer.3.output.dense.bias";
    let start = header[name]["data_offsets"][0].as_u64().unwrap() as usize + 8 + header_len;
    bytes[start + 4 * 5..start + 4 * 6].copy_from_slice(&f32::NAN.to_le_bytes());
    d.write("model.safetensors", bytes);
    minilm_fails(&d, &format!("tensor '{name}' [384] holds NaN at element 5"));
}

#[test]
fn minilm_without_a_model_says_how_to_get_one() {
    let d = Scratch::new("cli-empty");
    minilm_fails(&d, "scripts/fetch_minilm.sh");
}

/// Regression: `println!` panicked ("failed printing to stdout: Broken pipe") when the reader of
/// the output went away, as in `mnist | head -1`.
#[test]
fn a_closed_stdout_ends_quietly() {
    for (bin, args) in [
        (MNIST, &["--backend", "host", "--runs", "1"][..]),
        (MINILM, &["--backend", "host", "--peak-table"][..]),
    ] {
        let mut child = Command::new(bin)
            .args(args)
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            !stderr(&out).contains("panicked"),
            "{bin}: {}",
            stderr(&out)
        );
    }
}

/// `--timeout` reaches the device waits: on Vulkan (lavapipe in CI) a 1 µs limit fails the run
/// with exit 1 and the driver's timeout, and never crashes. Regression: the pools freed blocks
/// still used by the timed-out work, and lavapipe segfaulted.
#[test]
fn a_device_wait_timeout_is_a_clean_failure() {
    let o = run(
        MNIST,
        &[
            "--backend",
            "vulkan",
            "--timeout",
            "0.000001",
            "--runs",
            "1",
        ],
    );
    let err = stderr(&o);
    if err.contains("unavailable") {
        println!("SKIP timeout case: {err}");
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("did not complete within 1µs"), "{err}");
}

/// Issue 20: `minilm --devices 2 --json` reports each device's share and peak, the peaks stay
/// within the per-device budget, and the embeddings equal one device's; a budget below one
/// device's share fails with exit 1, naming the budget.
#[test]
fn minilm_on_two_devices_reports_per_device_peaks_within_budget() {
    let Some(dir) = minilm_dir() else { return };
    let dir = dir.display().to_string();
    let common = [
        "--model-dir",
        &dir,
        "--runs",
        "1",
        "--json",
        "A man is eating food.",
    ];
    let one = json(&run(
        MINILM,
        &[&["--backend", "host"][..], &common].concat(),
    ));
    let budget = 64u64 << 20;
    let two = json(&run(
        MINILM,
        &[
            &["--device-backends", "host,host", "--device-budget", "64MiB"][..],
            &common,
        ]
        .concat(),
    ));
    assert_eq!(
        two["sentences"][0]["embedding"], one["sentences"][0]["embedding"],
        "two devices differ from one"
    );
    let devices = two["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        let peak = d["peak_reserved_bytes"].as_u64().unwrap();
        assert!(peak > 0 && peak <= budget, "{d}");
        assert_eq!(d["budget_bytes"].as_u64(), Some(budget));
    }
    let o = run(
        MINILM,
        &[
            &[
                "--devices",
                "2",
                "--backend",
                "host",
                "--device-budget",
                "8MiB",
            ][..],
            &common,
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("(pool budget)"), "{}", stderr(&o));
}
