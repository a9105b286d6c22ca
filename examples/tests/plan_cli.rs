//! `tensormem-plan` as a user runs it: `--help`/`--version`, exit codes (0 met, 1 bad input,
//! 2 usage, 3 proved infeasible, 4 undecided), the three states of `feasible` in `--json`, and the
//! `generate`, `sweep`, `greedy` and `decide` subcommands.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

#[path = "support/run.rs"]
mod run;
#[path = "support/scratch.rs"]
mod scratch;
use run::{assert_help_lists, json, stderr};
use scratch::Scratch;

const PLAN: &str = env!("CARGO_BIN_EXE_tensormem-plan");

fn run(args: &[&str]) -> Output {
    run::run(PLAN, args)
}

/// `tensormem-plan generate ARGS -o OUT`, which must succeed.
fn generate(args: &[&str], out: &Path) {
    let mut all: Vec<&OsStr> = ["generate"].iter().chain(args).map(OsStr::new).collect();
    all.extend([OsStr::new("-o"), out.as_os_str()]);
    let o = run::run(PLAN, &all);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn help_documents_flags_exit_codes_and_feasible_states() {
    assert_help_lists(
        PLAN,
        &[
            "--capacity",
            "--time-limit",
            "--threads",
            "--json",
            "--out",
            "--svg",
            "sweep",
            "generate",
            "greedy",
            "greedy_finished",
            "3  with --capacity: proved",
            "4  with --capacity: undecided",
            "null   undecided",
        ],
    );
    assert_eq!(run(&["--version"]).status.code(), Some(0));
    assert_eq!(run(&[]).status.code(), Some(2), "no input is a usage error");
    assert_eq!(run(&["x.csv", "--bogus"]).status.code(), Some(2));
    assert_eq!(run(&["x.csv", "--time-limit", "-1"]).status.code(), Some(2));
    let threads = run(&["x.csv", "--threads", "1025"]);
    assert_eq!(
        threads.status.code(),
        Some(2),
        "more threads than MAX_THREADS"
    );
    assert!(stderr(&threads).contains("at most 1024"));
}

#[test]
fn bad_input_exits_one_with_the_reason() {
    let dir = Scratch::new("plan-cli");
    let missing = run(&["/nonexistent/instance.csv"]);
    assert_eq!(missing.status.code(), Some(1));
    let bad = dir.write("bad.csv", "id,lower,upper,size\n0,5,2,10\n");
    let o = run(&[bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error"));
}

#[test]
fn an_invalid_input_plan_names_buffers_by_their_ids() {
    let dir = Scratch::new("plan-cli");
    // Ids as the file wrote them, in a different order from the rows: the error must not say
    // "buffers 0 and 1".
    let overlap = dir.write(
        "named.csv",
        "id,lower,upper,size,offset\nconv1,0,4,8,0\nrelu7,2,6,8,4\npool,6,8,8,0\n",
    );
    let v = json(&run(&[overlap.to_str().unwrap(), "--json"]));
    assert_eq!(v["input_plan"]["valid"], Value::Bool(false));
    let err = v["input_plan"]["error"].as_str().unwrap();
    assert!(err.contains("buffers `conv1` and `relu7` overlap"), "{err}");
    let misaligned = dir.write(
        "misaligned.csv",
        "id,lower,upper,size,alignment,offset\nw,0,1,4,4,2\n",
    );
    let o = run(&[misaligned.to_str().unwrap()]);
    let text = run::stdout(&o);
    assert!(
        text.contains("offset of buffer `w` (2) is not a multiple of its alignment (4)"),
        "{text}"
    );
}

#[test]
fn capacity_decisions_map_to_feasible_and_exit_codes() {
    let dir = Scratch::new("plan-cli");
    let file = dir.join("pp.csv");
    let path = file.to_str().unwrap();
    generate(
        &[
            "--count",
            "40",
            "--seed",
            "3",
            "--horizon",
            "200",
            "--capacity",
            "65536",
            "--grid",
            "64",
        ],
        &file,
    );

    // At the lower bound: met, exit 0, the input's witness offsets verified too.
    let met = run(&[path, "--capacity", "65536", "--json"]);
    assert_eq!(met.status.code(), Some(0));
    let v = json(&met);
    assert_eq!(v["feasible"], Value::Bool(true));
    assert_eq!(v["decision"], "met");
    assert_eq!(v["peak"], 65536);
    assert_eq!(v["input_plan"]["valid"], Value::Bool(true));
    assert!(v["feasible_states"].as_str().unwrap().contains("null"));
    // Planning and parsing are timed apart: the time limit bounds `seconds` only.
    assert!(v["seconds"].as_f64().unwrap() >= 0.0);
    assert!(v["parse_seconds"].as_f64().unwrap() >= 0.0);

    // Below a live set: proved infeasible with the reason, exit 3, no plan written.
    let out = dir.join("never.csv");
    let proved = run(&[
        path,
        "--capacity",
        "65535",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(proved.status.code(), Some(3));
    let v = json(&proved);
    assert_eq!(v["feasible"], Value::Bool(false));
    assert!(
        v["infeasible_reason"]
            .as_str()
            .unwrap()
            .contains("need 65536 bytes")
    );
    assert!(!out.exists());

    // No time at all on an instance greedy cannot pack at capacity: undecided, exit 4.
    let hard = dir.join("hard.csv");
    let hard_path = hard.to_str().unwrap();
    generate(&["--count", "200"], &hard);
    let undecided = run(&[
        hard_path,
        "--capacity",
        "1048576",
        "--time-limit",
        "0",
        "--json",
    ]);
    let v = json(&undecided);
    assert!(
        v["greedy_peak"].as_u64().unwrap() > 1048576,
        "precondition: {v}"
    );
    assert_eq!(undecided.status.code(), Some(4));
    assert_eq!(v["feasible"], Value::Null);
    assert_eq!(v["decision"], "undecided (time limit reached)");
}

#[test]
fn sweep_prints_one_row_per_family_and_count() {
    let o = run(&[
        "sweep",
        "--family",
        "guillotine,pinwheel",
        "--counts",
        "20,30",
        "--seeds",
        "2",
        "--horizon",
        "100",
        "--capacity",
        "4096",
        "--grid",
        "16",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<Value> = run::stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r["seeds"], 2);
        assert!(r["solved"].as_u64().unwrap() <= 2);
    }
}

#[test]
fn generate_random_writes_a_reproducible_instance_that_plans_within_the_limit() {
    let dir = Scratch::new("plan-cli");
    let (a, b) = (dir.join("r-a.csv"), dir.join("r-b.csv"));
    for f in [&a, &b] {
        generate(&["--random", "--count", "3000", "--seed", "5"], f);
    }
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(
        text,
        std::fs::read_to_string(&b).unwrap(),
        "same seed, same file"
    );
    assert_eq!(
        text.lines().count(),
        3001,
        "a header and one row per buffer"
    );
    assert!(
        !text.lines().next().unwrap().contains("offset"),
        "no witness"
    );
    let o = run(&[a.to_str().unwrap(), "--time-limit", "5", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v = json(&o);
    assert_eq!(v["buffers"], 3000);
    assert!(v["peak"].as_u64().unwrap() >= v["lower_bound"].as_u64().unwrap());
    // A perfect-packing shape makes no sense for random lifetimes: a usage error.
    let clash = run(&[
        "generate", "--random", "--count", "10", "--family", "pinwheel",
    ]);
    assert_eq!(clash.status.code(), Some(2));
}

#[test]
fn greedy_runs_the_baseline_alone_with_either_fit_and_planning_is_never_worse() {
    let dir = Scratch::new("plan-cli");
    let file = dir.join("g.csv");
    let path = file.to_str().unwrap();
    generate(&["--random", "--count", "3000", "--seed", "1"], &file);
    let inst = tensormem::plan::parse_csv(&std::fs::read_to_string(&file).unwrap(), path).unwrap();
    let mut peaks = Vec::new();
    for (arg, fit) in [
        ("best", tensormem::plan::Fit::Best),
        ("lowest", tensormem::plan::Fit::Lowest),
    ] {
        let o = run(&["greedy", path, "--fit", arg, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let v = json(&o);
        let want = tensormem::plan::greedy_by_size_with(&inst.buffers, fit).unwrap();
        assert_eq!(v["peak"].as_u64(), Some(want.peak), "{arg}");
        assert_eq!(v["fit"], arg);
        assert_eq!(v["buffers"], 3000);
        assert!(v["peak"].as_u64().unwrap() >= v["lower_bound"].as_u64().unwrap());
        peaks.push(want.peak);
    }
    assert_ne!(peaks[0], peaks[1], "the two fits differ on this instance");
    // Where greedy by size finished within the limit, the plan is never worse than it.
    let v = json(&run(&[path, "--time-limit", "5", "--json"]));
    if v["greedy_finished"] == true {
        assert_eq!(v["greedy_peak"].as_u64(), Some(peaks[0]));
    }
    assert!(v["peak"].as_u64().unwrap() <= v["greedy_peak"].as_u64().unwrap());
    assert_eq!(
        run(&["greedy", path, "--fit", "worst"]).status.code(),
        Some(2)
    );
    assert_eq!(run(&["greedy", "missing.csv"]).status.code(), Some(1));
}

#[test]
fn decide_reads_the_capacity_from_each_name_and_reports_nodes() {
    let dir = Scratch::new("plan-cli");
    let packing = dir.join("pp.4096.csv");
    generate(
        &[
            "--count",
            "30",
            "--capacity",
            "4096",
            "--grid",
            "16",
            "--horizon",
            "100",
        ],
        &packing,
    );
    // One below the packing's optimum: a live set needs 4096 bytes, so that one is infeasible.
    let tight = dir.join("pp.4095.csv");
    std::fs::copy(&packing, &tight).unwrap();
    let o = run(&[
        "decide",
        packing.to_str().unwrap(),
        tight.to_str().unwrap(),
        "--threads",
        "1",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let rows: Vec<Value> = run::stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0]["capacity"].as_u64(), &rows[0]["feasible"]),
        (Some(4096), &Value::Bool(true))
    );
    assert_eq!(
        (rows[1]["capacity"].as_u64(), &rows[1]["feasible"]),
        (Some(4095), &Value::Bool(false))
    );
    assert!(rows[0]["nodes"].is_u64() && rows[0]["seconds"].is_f64());
    // Decided when the plan was found (or, infeasible, when the search ended): never after it.
    for r in &rows {
        let (at, all) = (
            r["decided_at"].as_f64().unwrap(),
            r["seconds"].as_f64().unwrap(),
        );
        assert!(at <= all, "{r}");
    }
    // A name without a capacity is refused before anything runs, with the reason.
    let unnamed = dir.join("pp.csv");
    std::fs::copy(&packing, &unnamed).unwrap();
    let o = run(&[
        "decide",
        packing.to_str().unwrap(),
        unnamed.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    assert!(stderr(&o).contains("NAME.CAPACITY.csv"));
}
