//! `tensormem-plan decide`: the decision table of a family of instances whose names carry their
//! capacity (MiniMalloc's `NAME.CAPACITY.csv`). Each file is decided alone, one after the other,
//! and its row gives the decision, the seconds until it was decided (a plan within the capacity
//! found, or the proof that none exists), the planning seconds in all (the solver lowers a
//! feasible peak further until its time limit), the exact search's nodes (a measure of work that,
//! unlike seconds, does not depend on the machine's load) and the load average.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tensormem::plan::{Progress, parse_csv, solve};
use tensormem::{Error, Result};

use super::args::DecideArgs;
use super::{io_err, options};

/// The capacity in `path`'s name: the last dot-separated field before `.csv`.
pub(crate) fn capacity_of(path: &str) -> Result<u64> {
    let stem = Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("");
    stem.rsplit('.')
        .next()
        .filter(|field| *field != stem)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| Error::Malformed {
            source_name: path.to_string(),
            line: 0,
            message: "the file name gives no capacity (expected NAME.CAPACITY.csv)".into(),
        })
}

/// The one-minute load average (Linux), `None` elsewhere.
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

pub(crate) fn decide(args: &DecideArgs) -> Result<()> {
    let capacities = args
        .files
        .iter()
        .map(|f| capacity_of(f))
        .collect::<Result<Vec<u64>>>()?;
    if !args.json {
        println!(
            "time limit {} s, {} threads",
            args.solver.time_limit, args.solver.threads
        );
        println!(
            "| instance | buffers | capacity | decided | decided at s | seconds | nodes | load |"
        );
        println!("|---|---|---|---|---|---|---|---|");
    }
    for (file, &capacity) in args.files.iter().zip(&capacities) {
        let text = std::fs::read_to_string(file).map_err(io_err(file))?;
        let inst = parse_csv(&text, file)?;
        // The first progress report of a peak within the capacity is when a plan decided it.
        let found: Arc<Mutex<Option<f64>>> = Arc::default();
        let seen = found.clone();
        let mut opts = options(&args.solver, Some(capacity), None);
        opts.progress = Some(Arc::new(move |p: &Progress| {
            let mut seen = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if p.best_peak <= capacity && seen.is_none() {
                *seen = Some(p.elapsed.as_secs_f64());
            }
        }));
        let s = solve(&inst.buffers, &opts)?;
        let decided = match s.feasible {
            Some(true) => "feasible",
            Some(false) => "infeasible",
            None => "no",
        };
        let load = load_average();
        let name = Path::new(file)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(file);
        let seconds = s.elapsed.as_secs_f64();
        let found = *found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A plan decides at its discovery; a proof of infeasibility at the end of the search.
        let decided_at = match s.feasible {
            Some(true) => found.or(Some(seconds)),
            Some(false) => Some(seconds),
            None => None,
        };
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "file": file, "buffers": inst.buffers.len(), "capacity": capacity,
                    "feasible": s.feasible, "decided_at": decided_at, "seconds": seconds,
                    "nodes": s.exact_nodes,
                    "load": load, "time_limit": args.solver.time_limit,
                    "threads": args.solver.threads,
                })
            );
        } else {
            let load = load.map_or("-".into(), |l| format!("{l:.2}"));
            let at = decided_at.map_or("-".into(), |t| format!("{t:.3}"));
            println!(
                "| {name} | {} | {capacity} | {decided} | {at} | {seconds:.3} | {} | {load} |",
                inst.buffers.len(),
                s.exact_nodes
            );
        }
    }
    Ok(())
}
