//! `tensormem-plan`: plan a DSA instance from CSV and report how close the plan is to optimal;
//! generate perfect packings and sweep the planner over them.
//!
//! ```text
//! tensormem-plan FILE.csv [--capacity N] [--time-limit SECS] [--seed N] [--threads N]
//!                [--out PLAN.csv] [--svg PLAN.svg] [--json]
//! tensormem-plan sweep [--family F] [--counts 100,150,...] [--seeds 10] [--time-limit SECS] [--json]
//! tensormem-plan generate --count N [--family F | --random] [--seed N] [-o FILE.csv]
//! tensormem-plan greedy FILE.csv [--fit best|lowest] [--json]
//! tensormem-plan decide NAME.CAPACITY.csv... [--time-limit SECS] [--threads N] [--json]
//! ```
//! Input is MiniMalloc's CSV `id,lower,upper,size[,alignment][,offset]` (half-open lifetimes). The
//! planner uses no device, so the tool has no `--backend` or `--timeout`; `--time-limit` bounds the
//! planning itself. Exit codes are listed in `--help`.

#[path = "tensormem-plan/args.rs"]
mod args;
#[path = "tensormem-plan/decide.rs"]
mod decide;
#[path = "tensormem-plan/report.rs"]
mod report;
#[path = "tensormem-plan/svg.rs"]
mod svg;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tensormem::plan::{
    Fit, PackingDesc, Plan, Progress, SolveOptions, greedy_by_size_with, lower_bound, parse_csv,
    random_lifetimes, solve, write_csv,
};
use tensormem::{Error, Result};
use tensormem_examples::huge_pages::HugePages;

use args::{Cli, Command, FitArg, GenerateArgs, GreedyArgs, PlanArgs, SolverArgs, SweepArgs};
use report::{gap, print_text, ratio, solution_json};
use svg::draw_svg;

/// Huge pages for the planner's arrays of millions of entries (see `huge_pages`).
#[global_allocator]
static ALLOCATOR: HugePages = HugePages;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Command::Sweep(args)) => sweep(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Generate(args)) => generate(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Greedy(args)) => greedy(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Decide(args)) => decide::decide(&args).map(|()| ExitCode::SUCCESS),
        None => match &cli.plan.file {
            Some(file) => plan_file(file, &cli.plan),
            None => {
                use clap::CommandFactory;
                Cli::command()
                    .error(
                        clap::error::ErrorKind::MissingRequiredArgument,
                        "an input FILE.csv (or a subcommand) is required",
                    )
                    .exit()
            }
        },
    };
    outcome.unwrap_or_else(|e| {
        eprintln!("tensormem-plan: error: {e}");
        ExitCode::FAILURE
    })
}

fn io_err(path: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_string(),
        source,
    }
}

/// A spinner on stderr showing the best peak, hidden under `--json` or when stderr is not a
/// terminal.
fn spinner(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

fn options(solver: &SolverArgs, capacity: Option<u64>, bar: Option<&ProgressBar>) -> SolveOptions {
    let progress = bar.map(|bar| {
        let bar = bar.clone();
        Arc::new(move |p: &Progress| {
            bar.set_message(format!(
                "{}: best peak {} ({:+.4}% over the lower bound)",
                p.phase,
                p.best_peak,
                gap(p.best_peak, p.lower_bound) * 100.0
            ));
        }) as Arc<dyn Fn(&Progress) + Send + Sync>
    });
    SolveOptions {
        time_limit: Duration::from_secs_f64(solver.time_limit),
        capacity,
        seed: solver.seed,
        threads: solver.threads,
        progress,
        ..SolveOptions::default()
    }
}

/// Plans the file; the exit code says whether the capacity (if any) was met.
fn plan_file(file: &str, args: &PlanArgs) -> Result<ExitCode> {
    let parsing = std::time::Instant::now();
    let text = std::fs::read_to_string(file).map_err(io_err(file))?;
    let inst = parse_csv(&text, file)?;
    drop(text);
    let parse_seconds = parsing.elapsed().as_secs_f64();
    let input_plan = match &inst.offsets {
        Some(offsets) => {
            let plan = Plan::from_offsets(&inst.buffers, offsets.clone());
            let verdict = inst.verify(&plan, args.capacity);
            Some((plan.peak, verdict.map_err(|e| e.to_string())))
        }
        None => None,
    };
    let bar = spinner(args.json);
    let s = solve(
        &inst.buffers,
        &options(&args.solver, args.capacity, Some(&bar)),
    )?;
    bar.finish_and_clear();
    for (path, svg) in [(&args.out, false), (&args.svg, true)] {
        let Some(path) = path else { continue };
        match &s.plan {
            Some(plan) => {
                let text = if svg {
                    draw_svg(&inst.ids, &inst.buffers, plan, s.lower_bound, args.capacity)
                } else {
                    write_csv(&inst.ids, &inst.buffers, Some(&plan.offsets))?
                };
                std::fs::write(path, text).map_err(io_err(path))?;
            }
            None => eprintln!("tensormem-plan: no plan within the capacity; {path} not written"),
        }
    }
    if args.json {
        let mut obj = solution_json(&s, args.capacity);
        obj["file"] = file.into();
        obj["buffers"] = inst.buffers.len().into();
        obj["parse_seconds"] = parse_seconds.into();
        if let Some((peak, verdict)) = &input_plan {
            obj["input_plan"] = serde_json::json!({
                "peak": peak,
                "valid": verdict.is_ok(),
                "error": verdict.as_ref().err(),
            });
        }
        println!("{obj}");
    } else {
        print_text(file, inst.buffers.len(), &s, args.capacity);
        if let Some((peak, verdict)) = &input_plan {
            match verdict {
                Ok(()) => println!("input plan:     valid, peak {peak} bytes"),
                Err(e) => println!("input plan:     INVALID: {e}"),
            }
        }
    }
    let code = match (args.capacity, s.feasible) {
        (Some(_), Some(false)) => ExitCode::from(3),
        (Some(_), None) => ExitCode::from(4),
        _ => ExitCode::SUCCESS,
    };
    // The process exits next and the OS takes the memory back at once; freeing a million id
    // strings one by one took up to a tenth of a second under load, after the plan was ready.
    std::mem::forget(inst);
    std::mem::forget(s);
    Ok(code)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    if args.random {
        let buffers = random_lifetimes(args.count, args.seed);
        let ids: Vec<String> = (0..buffers.len()).map(|i| i.to_string()).collect();
        return write_out(args.out.as_deref(), &write_csv(&ids, &buffers, None)?);
    }
    let desc = PackingDesc {
        count: args.count,
        capacity: args.shape.capacity,
        horizon: args.shape.horizon,
        grid: args.shape.grid,
        family: args.family.into(),
        seed: args.seed,
    };
    let (buffers, witness) = desc.generate();
    let ids: Vec<String> = (0..buffers.len()).map(|i| i.to_string()).collect();
    write_out(
        args.out.as_deref(),
        &write_csv(&ids, &buffers, Some(&witness))?,
    )
}

/// Greedy by size without a limit, verified, against the lower bound.
fn greedy(args: &GreedyArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file).map_err(io_err(&args.file))?;
    let inst = parse_csv(&text, &args.file)?;
    drop(text);
    let (fit, name) = match args.fit {
        FitArg::Best => (Fit::Best, "best"),
        FitArg::Lowest => (Fit::Lowest, "lowest"),
    };
    let started = std::time::Instant::now();
    let plan = greedy_by_size_with(&inst.buffers, fit)?;
    let seconds = started.elapsed().as_secs_f64();
    inst.verify(&plan, None)?;
    let lb = lower_bound(&inst.buffers);
    if args.json {
        let obj = serde_json::json!({
            "file": args.file,
            "buffers": inst.buffers.len(),
            "fit": name,
            "lower_bound": lb,
            "peak": plan.peak,
            "peak_over_lower_bound": ratio(plan.peak, lb),
            "seconds": seconds,
        });
        println!("{obj}");
    } else {
        println!("file:           {}", args.file);
        println!("buffers:        {}", inst.buffers.len());
        println!("lower bound:    {lb} bytes");
        println!(
            "greedy by size: {} bytes ({name} fit; peak / lower bound = {:.6})",
            plan.peak,
            ratio(plan.peak, lb)
        );
        println!("time:           {seconds:.3} s");
    }
    Ok(())
}

/// Writes `text` to `path`, or to stdout without one.
fn write_out(path: Option<&str>, text: &str) -> Result<()> {
    match path {
        Some(path) => std::fs::write(path, text).map_err(io_err(path)),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Solves every (family, count, seed) at capacity and prints one row per (family, count).
fn sweep(args: &SweepArgs) -> Result<()> {
    if !args.json {
        println!(
            "| family | n | solved | solved <= 5 s | solved <= 10 s | mean s | median s | max s | greedy at capacity |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    let bar = spinner(args.json);
    for &family in &args.family {
        for &count in &args.counts {
            let mut times = Vec::new();
            let mut unsolved = Vec::new();
            let (mut solved, mut within5, mut within10, mut greedy) = (0, 0, 0, 0);
            for seed in 0..args.seeds {
                let desc = PackingDesc {
                    count,
                    capacity: args.shape.capacity,
                    horizon: args.shape.horizon,
                    grid: args.shape.grid,
                    family: family.into(),
                    seed,
                };
                let (buffers, _) = desc.generate();
                let cap = lower_bound(&buffers);
                bar.set_message(format!("{family:?} n={count} seed={seed}"));
                let s = solve(&buffers, &options(&args.solver, Some(cap), None))?;
                let secs = s.elapsed.as_secs_f64();
                times.push(secs);
                if s.feasible == Some(true) {
                    solved += 1;
                    within5 += usize::from(secs <= 5.0);
                    within10 += usize::from(secs <= 10.0);
                } else {
                    unsolved.push(seed);
                }
                greedy += usize::from(s.greedy_peak <= cap);
            }
            let per_seed = times.clone();
            times.sort_by(f64::total_cmp);
            let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
            let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
            let max = times.last().copied().unwrap_or(0.0);
            let seeds = args.seeds;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "family": format!("{family:?}"), "count": count, "seeds": seeds,
                        "solved": solved, "solved_within_5s": within5, "solved_within_10s": within10,
                        "mean_seconds": mean, "median_seconds": median, "max_seconds": max,
                        "greedy_at_capacity": greedy,
                        "seconds_per_seed": per_seed, "unsolved_seeds": unsolved,
                        "time_limit": args.solver.time_limit, "threads": args.solver.threads,
                    })
                );
            } else {
                bar.suspend(|| {
                    println!(
                        "| {family:?} | {count} | {solved}/{seeds} | {within5}/{seeds} | {within10}/{seeds} | {mean:.3} | {median:.3} | {max:.3} | {greedy}/{seeds} |"
                    )
                });
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}
