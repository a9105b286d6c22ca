//! The planner target table: every instance of the targets, solved under its time budget,
//! against the lower bound and the greedy-by-size baseline measured in the same run.
//!
//! Run: `cargo bench -p tensormem-plan --bench plan` (optionally a substring filter:
//! `cargo bench -p tensormem-plan --bench plan -- somas`). Trace files come from
//! `shared/data/traces`, found by walking up from this crate (or `TENSORMEM_TRACES`); missing files
//! are reported as skipped rows.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "benchmark driver: a failure aborts the run"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tensormem_plan::plan::{
    Buffer, PackingDesc, PackingFamily, SolveOptions, greedy_by_size, lower_bound, parse_csv,
    solve, verify,
};

fn traces_dir() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TENSORMEM_TRACES") {
        return Some(PathBuf::from(p));
    }
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let cand = dir.join("shared/data/traces");
        if cand.is_dir() {
            return Some(cand);
        }
        if !dir.pop() {
            return None;
        }
    }
}

struct Case {
    name: String,
    buffers: Vec<Buffer>,
    /// Decision form at this capacity, or minimisation.
    capacity: Option<u64>,
    budget: Duration,
    /// Target: peak / LB - 1 at most this (decision cases: must be feasible).
    target_gap: f64,
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut cases = Vec::new();
    let dir = traces_dir();
    let load = |rel: &str| -> Option<Vec<Buffer>> {
        let path = dir.as_ref()?.join(rel);
        let text = std::fs::read_to_string(&path).ok()?;
        Some(parse_csv(&text, rel).unwrap().buffers)
    };
    for f in ["a.6", "b.6", "c.8", "d.9", "e.12", "f.14", "g.7"] {
        let cap: u64 = f.split('.').nth(1).unwrap().parse().unwrap();
        if let Some(b) = load(&format!("omnimalloc-small/{f}.csv")) {
            cases.push(Case {
                name: format!("omnimalloc-small/{f}"),
                buffers: b,
                capacity: Some(cap),
                budget: Duration::from_secs(10),
                target_gap: 0.0,
            });
        }
    }
    // The perfect packings (1000 steps × 1 MiB on a 1 KiB grid) and the other families;
    // `tensormem-plan sweep` runs the full 10-seed sweep.
    for (n, seed, family) in [
        (100, 1, PackingFamily::Guillotine),
        (200, 2, PackingFamily::Guillotine),
        (250, 3, PackingFamily::Guillotine),
        (300, 4, PackingFamily::Guillotine),
        (200, 5, PackingFamily::LongAndShort),
        (200, 6, PackingFamily::Pinwheel),
    ] {
        let desc = PackingDesc {
            count: n,
            capacity: 1 << 20,
            horizon: 1000,
            grid: 1024,
            family,
            seed,
        };
        let (b, _) = desc.generate();
        let cap = lower_bound(&b);
        cases.push(Case {
            name: format!("perfect packing {family:?} n={n} seed={seed}"),
            buffers: b,
            capacity: Some(cap),
            budget: Duration::from_secs(10),
            target_gap: 0.0,
        });
    }
    for (rel, secs, gap) in [
        ("idealloc/somas_tensors/resnet50.csv", 1, 0.005),
        ("idealloc/somas_tensors/pangu_2.6B.csv", 1, 0.005),
        ("derived/mobilenet_v2_224_fp32.csv", 1, 0.005),
        ("derived/gpt2s_train_b8_s1024_bf16.csv", 1, 0.005),
        ("derived/gpt2s_train_b8_s1024_bf16_flash.csv", 1, 0.005),
        ("derived/llama8b_prefill_s2048_bf16_flash.csv", 1, 0.005),
        ("derived/llama8b_prefill_s1024_bf16_noflash.csv", 1, 0.005),
        ("idealloc/iopddl/G_1.csv", 10, 0.001),
        ("idealloc/iopddl/S_1.csv", 10, 0.01),
        ("idealloc/iopddl/Y_1.csv", 5, 0.004),
    ] {
        match load(rel) {
            Some(b) => cases.push(Case {
                name: rel.trim_end_matches(".csv").into(),
                buffers: b,
                capacity: None,
                budget: Duration::from_secs(secs),
                target_gap: gap,
            }),
            None => println!("skipped {rel}: trace not found (set TENSORMEM_TRACES)"),
        }
    }
    println!(
        "| instance | buffers | LB | greedy | greedy/LB | greedy s | ours | ours/LB | budget s | seconds | target | met |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for c in cases {
        if filter
            .as_ref()
            .is_some_and(|f| !c.name.contains(f.as_str()))
        {
            continue;
        }
        let lb = lower_bound(&c.buffers);
        let t = Instant::now();
        let greedy = greedy_by_size(&c.buffers).unwrap();
        let greedy_s = t.elapsed().as_secs_f64();
        let opts = SolveOptions {
            time_limit: c.budget,
            capacity: c.capacity,
            ..SolveOptions::default()
        };
        let s = solve(&c.buffers, &opts).unwrap();
        if let Some(p) = &s.plan {
            verify(&c.buffers, p, c.capacity).unwrap();
        }
        let ratio = |p: u64| p as f64 / lb as f64;
        let (target, met) = match c.capacity {
            Some(cap) => (format!("fit {cap}"), s.feasible == Some(true)),
            None => (
                format!(
                    "<= {:.1}% in {} s",
                    c.target_gap * 100.0,
                    c.budget.as_secs()
                ),
                ratio(s.best_peak) - 1.0 <= c.target_gap + 1e-12,
            ),
        };
        println!(
            "| {} | {} | {} | {} | {:.4} | {:.3} | {} | {:.4} | {} | {:.3} | {} | {} |",
            c.name,
            c.buffers.len(),
            lb,
            greedy.peak,
            ratio(greedy.peak),
            greedy_s,
            s.best_peak,
            ratio(s.best_peak),
            c.budget.as_secs(),
            s.elapsed.as_secs_f64(),
            target,
            if met { "yes" } else { "NO" },
        );
    }
}
