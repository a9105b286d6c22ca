//! Runs every case on every target in both completion modes (blocking forms, then awaitable forms
//! driven by a minimal executor), on two-device targets on both devices at once (see the crate
//! doc), prints a table of what ran, passed, failed or was skipped, and
//! decides the exit status. The browser runs the same cases through `wasm-bindgen-test` instead.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tensormem::{Backend, Waiting};

use crate::{Case, Ctx, Target};

/// The modes every case runs in natively, with the suffix that names the run in the report.
const MODES: [(Waiting, &str); 2] = [(Waiting::Blocking, ""), (Waiting::Async, " (async)")];

/// Result of one target.
#[derive(Debug)]
pub enum Outcome {
    /// The backend could not start here.
    Skipped(String),
    /// Cases run: (case name, failure message if any, seconds).
    Ran(Vec<(String, Option<String>, f64)>),
}

fn required() -> HashSet<String> {
    std::env::var("TENSORMEM_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Runs `case` once on a fresh backend (its peer too on a two-device target) in `mode`.
fn run_once(
    case: &Case,
    backend: Arc<dyn Backend>,
    peer: Option<Arc<dyn Backend>>,
    mode: Waiting,
) -> Option<String> {
    let ctx = Ctx {
        backend,
        peer,
        mode,
    };
    let result = catch_unwind(AssertUnwindSafe(|| pollster::block_on((case.run)(&ctx))));
    match result {
        Ok(Ok(())) => None,
        Ok(Err(msg)) => Some(msg),
        Err(p) => Some(format!(
            "PANIC: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

fn run_case(target: &Target, case: &Case, mode: Waiting) -> Option<String> {
    let backend = match (target.create)() {
        Ok(b) => b,
        Err(e) => return Some(format!("backend failed to start for this case: {e}")),
    };
    let mut failure = match target.second {
        None => run_once(case, backend.clone(), None, mode),
        Some(second) => {
            let peer = match second() {
                Ok(b) => b,
                Err(e) => return Some(format!("second device failed to start: {e}")),
            };
            if case.devices == 2 {
                run_once(case, backend.clone(), Some(peer), mode)
            } else {
                // The same case on both devices at once, each with the other as its peer.
                let (a, b) = std::thread::scope(|s| {
                    let (b0, b1) = (backend.clone(), peer.clone());
                    let first = s.spawn(move || run_once(case, b0, Some(b1), mode));
                    let other = run_once(case, peer.clone(), Some(backend.clone()), mode);
                    (
                        first
                            .join()
                            .unwrap_or_else(|_| Some("PANIC in the device 0 thread".into())),
                        other,
                    )
                });
                match (a, b) {
                    (None, None) => None,
                    (a, b) => Some(format!(
                        "device 0: {}; device 1: {}",
                        a.as_deref().unwrap_or("ok"),
                        b.as_deref().unwrap_or("ok")
                    )),
                }
            }
        }
    };
    if let Some(after) = target.after_case
        && let Err(msg) = after(&backend)
    {
        failure = Some(match failure {
            Some(f) => format!("{f}; {msg}"),
            None => msg,
        });
    }
    failure
}

/// `f(0)`, …, `f(n - 1)` on `jobs` threads, each taking the next index when it is free; the
/// results in index order. A panic in `f` is the caller's panic.
pub fn in_parallel<T: Send>(n: usize, jobs: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = f(i);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|d| d.0);
    done.into_iter().map(|d| d.1).collect()
}

fn selected(filter: &Option<String>, name: &str) -> bool {
    filter
        .as_ref()
        .is_none_or(|f| f.split(',').any(|x| name.contains(x.trim())))
}

/// Whether `name` is one of the case names listed in `TENSORMEM_SKIP_CASES` (comma-separated,
/// whole names: a run can leave out one case without the cases whose names contain it).
fn skipped(skip: &Option<String>, name: &str) -> bool {
    skip.as_ref()
        .is_some_and(|s| s.split(',').any(|x| x.trim() == name))
}

/// Runs the selected cases on one target, printing a line per case as it ends, and one per case
/// left out by `TENSORMEM_SKIP_CASES`.
fn run_target(target: &Target, cases: &[Case], case_filter: &Option<String>) -> Outcome {
    let probe = match (target.create)() {
        Err(e) => return Outcome::Skipped(e.to_string()),
        Ok(probe) => probe,
    };
    // Which device ran the cases (a CPU driver and a GPU read alike otherwise).
    println!(
        "  target {:<16} on {}",
        target.name,
        probe.capabilities().device_name
    );
    drop(probe);
    let skip = std::env::var("TENSORMEM_SKIP_CASES").ok();
    let mut results = Vec::new();
    for case in cases {
        if !selected(case_filter, case.name)
            || (case.devices == 2 && target.second.is_none())
            || (case.devices == 1 && target.set_cases_only)
        {
            continue;
        }
        if skipped(&skip, case.name) {
            println!(
                "  skip  {:<16} {:<42} (TENSORMEM_SKIP_CASES)",
                target.name, case.name
            );
            continue;
        }
        for (mode, suffix) in MODES {
            let name = format!("{}{suffix}", case.name);
            let start = Instant::now();
            let failure = run_case(target, case, mode);
            let secs = start.elapsed().as_secs_f64();
            match &failure {
                None => println!("  ok    {:<16} {name:<42} {secs:>7.2}s", target.name),
                Some(f) => println!("  FAIL  {:<16} {name:<42} {secs:>7.2}s  {f}", target.name),
            }
            results.push((name, failure, secs));
        }
    }
    Outcome::Ran(results)
}

/// Runs `cases` on `targets` (filtered by the `TENSORMEM_TARGETS` and `TENSORMEM_CASES`
/// filters when set: comma-separated substrings, any of which selects; less the whole case names
/// in `TENSORMEM_SKIP_CASES`), prints the report, and
/// returns whether everything required passed.
pub fn run_suite(targets: &[Target], cases: &[Case]) -> bool {
    // A malformed limit fails the run rather than skipping every target that reads it.
    if let Err(e) = crate::backends::wait_limit(Duration::ZERO) {
        println!("conformance: {e}");
        return false;
    }
    let required = required();
    let target_filter = std::env::var("TENSORMEM_TARGETS").ok();
    let case_filter = std::env::var("TENSORMEM_CASES").ok();
    let chosen: Vec<&Target> = targets
        .iter()
        .filter(|t| selected(&target_filter, t.name))
        .collect();
    // One target at a time: side by side, lavapipe crashed (SIGSEGV with vulkan-2dev beside
    // wgpu-2dev, one run in four).
    let outcomes: Vec<Outcome> = chosen
        .iter()
        .map(|t| run_target(t, cases, &case_filter))
        .collect();
    let mut ok = true;
    let mut summary = Vec::new();
    for (target, outcome) in chosen.iter().zip(outcomes) {
        let is_required = required.contains(target.name) || required.contains(target.backend);
        match &outcome {
            Outcome::Skipped(reason) => {
                let verdict = if is_required {
                    "FAILED (required)"
                } else {
                    "skipped"
                };
                println!("  {verdict:<6} {:<16} {reason}", target.name);
                if is_required {
                    ok = false;
                }
            }
            Outcome::Ran(results) => {
                if results.iter().any(|r| r.1.is_some()) {
                    ok = false;
                }
            }
        }
        summary.push((target.name, outcome));
    }
    for name in &required {
        if !targets.iter().any(|t| t.name == name || t.backend == name) {
            println!("  required backend '{name}' is not known to the suite");
            ok = false;
        }
    }
    println!("\nconformance summary:");
    for (name, outcome) in &summary {
        match outcome {
            Outcome::Skipped(reason) => println!("  {name:<16} skipped: {reason}"),
            Outcome::Ran(results) => {
                let failed = results.iter().filter(|r| r.1.is_some()).count();
                let secs = results.iter().fold(0.0, |s, r| s + r.2);
                println!(
                    "  {name:<16} ran {} cases: {} passed, {failed} failed ({secs:.1}s)",
                    results.len(),
                    results.len() - failed
                );
            }
        }
    }
    ok
}
