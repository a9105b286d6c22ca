//! `tensormem-plan`: plan a DSA instance from CSV and report how close the plan is to optimal;
//! generate perfect packings and sweep the planner over them.
//!
//! ```text
//! tensormem-plan FILE.csv [--capacity N] [--time-limit SECS] [--seed N] [--threads N]
//!                [--out PLAN.csv] [--svg PLAN.svg] [--json]
//! tensormem-plan sweep [--family F] [--counts 100,150,...] [--seeds 10] [--time-limit SECS] [--json]
//! tensormem-plan generate --count N [--family F | --random] [--seed N] [-o FILE.csv]
//! tensormem-plan greedy FILE.csv [--fit best|lowest] [--json]
//! ```
//! Input is MiniMalloc's CSV `id,lower,upper,size[,alignment][,offset]` (half-open lifetimes). The
//! planner uses no device, so the tool has no `--backend` or `--timeout`; `--time-limit` bounds the
//! planning itself. Exit codes are listed in `--help`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tensormem::plan::{
    Buffer, Fit, MAX_THREADS, PackingDesc, PackingFamily, Plan, Progress, Solution, SolveOptions,
    greedy_by_size_with, lower_bound, parse_csv, random_lifetimes, solve, write_csv,
};
use tensormem::{Error, Result};
use tensormem_examples::cli::xml_escape;
use tensormem_examples::huge_pages::HugePages;

/// Huge pages for the planner's arrays of millions of entries (see `huge_pages`).
#[global_allocator]
static ALLOCATOR: HugePages = HugePages;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (with --capacity: a plan within it was found)
  1  failure while running: unreadable or malformed input, I/O error
  2  usage error
  3  with --capacity: proved that no plan fits (`feasible` is false)
  4  with --capacity: undecided, the time limit ran out first (`feasible` is null)

`feasible` in --json has three states (in text, the `capacity:` line says the same in words):
  true   a plan within --capacity was found (\"met\"; always true without --capacity)
  false  proved that no plan within --capacity exists (\"proved infeasible\");
         `infeasible_reason` says how
  null   undecided: the time limit ran out before a plan or a proof was found (\"undecided\")

--json also reports `seconds` (planning, the part --time-limit bounds) and `parse_seconds`
(reading and parsing FILE).

Greedy by size (largest first, into the best-fitting gap) is the baseline. --json says whether it
ran to the end within --time-limit (`greedy_finished`) and which heuristic produced the plan
(`algorithm`); where greedy finished, the plan is never worse than it (`greedy_peak`). Above 4096
buffers it runs beside the other heuristics, after its cheaper lowest-fit twin, and it does not
finish at every scale: on random instances (`generate --random`) it needs 19 CPU s at 10^5
buffers and 36 at 2*10^5. There `greedy_peak` is the first plan's (sweep-line good fit, O(n)
after a sort), lower on those instances: 1.04x the lower bound against greedy's 1.15x (1.07x at
the lowest fit). `greedy FILE` runs greedy by size alone, without a limit.";

/// Plan a static memory layout (Dynamic Storage Allocation) from a CSV instance.
///
/// The planner runs exact provers and heuristics in parallel from the start, within the time
/// limit, and reports the peak against the max-load lower bound and the greedy-by-size baseline.
#[derive(Debug, Parser)]
#[command(
    name = "tensormem-plan",
    version,
    after_help = EXIT_CODES,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    plan: PlanArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Solve generated perfect packings (optimum = capacity) and print solved counts and times.
    Sweep(SweepArgs),
    /// Write one generated perfect packing as CSV, with the witness offsets (or, with `--random`,
    /// an instance with random lifetimes).
    Generate(GenerateArgs),
    /// Run greedy by size alone, to the end, without a time limit (minutes at 10^6 buffers): the
    /// baseline the planner's limited answer is measured against. The plan is verified.
    Greedy(GreedyArgs),
}

#[derive(Debug, Args)]
struct GreedyArgs {
    /// Instance, as for planning.
    file: String,
    /// Gap rule: the best-fitting gap (TFLite) or the lowest one that fits (XLA's newer option).
    #[arg(long, value_enum, default_value = "best")]
    fit: FitArg,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FitArg {
    Best,
    Lowest,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// Instance: `id,lower,upper,size[,alignment][,offset]` per line (offsets, if present, are
    /// verified and reported).
    file: Option<String>,
    /// Decision form: decide whether a plan with peak <= N bytes exists, then lower the peak.
    #[arg(long, value_name = "N")]
    capacity: Option<u64>,
    #[command(flatten)]
    solver: SolverArgs,
    /// Write the plan as CSV (ids, lifetimes, sizes, offsets).
    #[arg(long, value_name = "PLAN.csv")]
    out: Option<String>,
    /// Draw the plan as SVG (time right, address up).
    #[arg(long, value_name = "PLAN.svg")]
    svg: Option<String>,
    /// Print one JSON object instead of text; `feasible` is true, false or null (see below).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SolverArgs {
    /// Wall-clock limit of the planning (parsing excluded), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = seconds)]
    time_limit: f64,
    /// Seed of the randomised heuristics.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Portfolio threads, 0 to 1024; 0 = every core, and counts above the cores run on the cores.
    /// Results depend on the count, not on timing.
    #[arg(long, default_value_t = 0, value_parser = threads)]
    threads: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Family {
    /// Random guillotine cuts of the rectangle.
    Guillotine,
    /// Long-lived large buffers in some byte bands, short small ones in the others.
    LongAndShort,
    /// Guillotine cuts mixed with five-piece pinwheels (non-guillotine).
    Pinwheel,
}

impl From<Family> for PackingFamily {
    fn from(f: Family) -> Self {
        match f {
            Family::Guillotine => PackingFamily::Guillotine,
            Family::LongAndShort => PackingFamily::LongAndShort,
            Family::Pinwheel => PackingFamily::Pinwheel,
        }
    }
}

#[derive(Debug, Args)]
struct ShapeArgs {
    /// Rectangle height in bytes: the capacity and the optimal peak.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    capacity: u64,
    /// Rectangle width in time steps.
    #[arg(long, value_name = "STEPS", default_value_t = 1000)]
    horizon: u64,
    /// Byte granularity of sizes and offsets.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    grid: u64,
}

/// The issue's sweep: `sweep` (1000 steps × 1 MiB, 1 KiB grid, n = 100..300, 10 seeds). The
/// MiniMalloc-style hard sets: `sweep --horizon 1048576 --family pinwheel --counts
/// 150,200,250,300,350,400,450`.
#[derive(Debug, Args)]
struct SweepArgs {
    /// Families to sweep (repeat or comma-separate).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "guillotine")]
    family: Vec<Family>,
    /// Buffer counts.
    #[arg(long, value_delimiter = ',', default_value = "100,150,200,250,300")]
    counts: Vec<usize>,
    /// Seeds per count (0, 1, ...).
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    #[command(flatten)]
    shape: ShapeArgs,
    #[command(flatten)]
    solver: SolverArgs,
    /// Print one JSON object per row instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct GenerateArgs {
    /// Number of buffers.
    #[arg(long)]
    count: usize,
    /// Write random lifetimes and sizes instead (no witness, no known optimum): starts uniform in
    /// [0, count), lifetimes 1 to 10^4 steps, sizes 64 B to 1 MiB, about 5,000 live at a time;
    /// the large instances the time limits are measured on.
    #[arg(long, conflicts_with_all = ["family", "capacity", "horizon", "grid"])]
    random: bool,
    #[arg(long, value_enum, default_value = "guillotine")]
    family: Family,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Output file (default: stdout).
    #[arg(short, long, value_name = "FILE.csv")]
    out: Option<String>,
}

fn seconds(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(v)
        .map(|_| v)
        .map_err(|_| format!("{v} is not a valid duration"))
}

fn threads(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a thread count"))?;
    if n > MAX_THREADS {
        return Err(format!(
            "{n} threads: at most {MAX_THREADS} (0 = every core)"
        ));
    }
    Ok(n)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Command::Sweep(args)) => sweep(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Generate(args)) => generate(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Greedy(args)) => greedy(&args).map(|()| ExitCode::SUCCESS),
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

/// The three states of `feasible`, in words.
fn decision(s: &Solution, capacity: Option<u64>) -> &'static str {
    match (capacity, s.feasible) {
        (None, _) => "not asked (no --capacity)",
        (Some(_), Some(true)) => "met",
        (Some(_), Some(false)) => "proved infeasible",
        (Some(_), None) => "undecided (time limit reached)",
    }
}

fn solution_json(s: &Solution, capacity: Option<u64>) -> serde_json::Value {
    serde_json::json!({
        "lower_bound": s.lower_bound,
        "peak": s.best_peak,
        "peak_over_lower_bound": ratio(s.best_peak, s.lower_bound),
        "greedy_peak": s.greedy_peak,
        "greedy_finished": s.greedy_finished,
        "greedy_over_lower_bound": ratio(s.greedy_peak, s.lower_bound),
        "capacity": capacity,
        "feasible": s.feasible,
        "feasible_states": "true: a plan within capacity was found (always true without one); \
                            false: proved that none exists (see infeasible_reason); \
                            null: undecided, the time limit ran out first",
        "decision": decision(s, capacity),
        "infeasible_reason": s.infeasible_reason,
        "proved_optimal": s.proved_optimal,
        "algorithm": s.algorithm,
        "threads": s.threads,
        "seconds": s.elapsed.as_secs_f64(),
        "stage_seconds": {
            "validation": s.stages.validation.as_secs_f64(),
            "first_plan": s.stages.first_plan.as_secs_f64(),
            "search": s.stages.search.as_secs_f64(),
            "final_verification": s.stages.final_verification.as_secs_f64(),
        },
    })
}

fn print_text(file: &str, buffers: usize, s: &Solution, capacity: Option<u64>) {
    println!("file:           {file}");
    println!("buffers:        {buffers}");
    println!("lower bound:    {} bytes", s.lower_bound);
    println!(
        "peak:           {} bytes (peak / lower bound = {:.6})",
        s.best_peak,
        ratio(s.best_peak, s.lower_bound)
    );
    println!(
        "greedy by size: {} bytes (greedy / lower bound = {:.6}; ours is {:.3}% lower){}",
        s.greedy_peak,
        ratio(s.greedy_peak, s.lower_bound),
        (1.0 - s.best_peak as f64 / s.greedy_peak.max(1) as f64) * 100.0,
        if s.greedy_finished {
            ""
        } else {
            " [greedy cut by the time limit: sweep-line good fit shown]"
        }
    );
    if let Some(cap) = capacity {
        println!("capacity:       {cap} bytes: {}", decision(s, capacity));
        if let Some(why) = &s.infeasible_reason {
            println!("                {why}");
        }
    }
    println!(
        "optimal:        {}",
        if s.proved_optimal {
            "proved"
        } else {
            "not proved"
        }
    );
    println!("algorithm:      {}", s.algorithm);
    println!("threads:        {}", s.threads);
    println!("time:           {:.3} s", s.elapsed.as_secs_f64());
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

fn ratio(peak: u64, lb: u64) -> f64 {
    if lb == 0 {
        1.0
    } else {
        peak as f64 / lb as f64
    }
}

fn gap(peak: u64, lb: u64) -> f64 {
    ratio(peak, lb) - 1.0
}

/// Draws the plan: time on x, address on y (0 at the bottom), one rectangle per buffer, with the
/// lower bound (and capacity) as horizontal lines. Hover a rectangle for its id, lifetime and range.
fn draw_svg(ids: &[String], buffers: &[Buffer], plan: &Plan, lb: u64, cap: Option<u64>) -> String {
    let (w, h, margin) = (1200.0f64, 700.0f64, 40.0f64);
    let t0 = buffers.iter().map(|b| b.lower).min().unwrap_or(0);
    let t1 = buffers
        .iter()
        .map(|b| b.upper)
        .max()
        .unwrap_or(1)
        .max(t0 + 1);
    let top = plan.peak.max(cap.unwrap_or(0)).max(lb).max(1);
    let x = |t: u64| margin + (t - t0) as f64 / (t1 - t0) as f64 * (w - 2.0 * margin);
    let y = |a: u64| h - margin - a as f64 / top as f64 * (h - 2.0 * margin);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{margin}\" y=\"20\">{} buffers, peak {} bytes, lower bound {} bytes ({:+.3}%); time → , address ↑</text>\n",
        buffers.len(),
        plan.peak,
        lb,
        gap(plan.peak, lb) * 100.0
    );
    for (i, b) in buffers.iter().enumerate() {
        let o = plan.offsets[i];
        let hue = (i as u64).wrapping_mul(2654435761) % 360;
        let (x0, x1) = (x(b.lower), x(b.upper));
        let (y0, y1) = (y(o + b.size), y(o));
        out.push_str(&format!(
            "<rect x=\"{x0:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"hsl({hue},65%,65%)\" stroke=\"black\" stroke-width=\"0.3\"><title>{} [{}, {}) bytes [{}, {})</title></rect>\n",
            (x1 - x0).max(0.5),
            (y1 - y0).max(0.5),
            xml_escape(&ids[i]),
            b.lower,
            b.upper,
            o,
            o + b.size
        ));
    }
    let mut line = |a: u64, colour: &str, label: &str| {
        let (ya, x_end) = (y(a), w - margin);
        let (tx, ty) = (w - margin - 120.0, y(a) - 3.0);
        out.push_str(&format!(
            "<line x1=\"{margin}\" x2=\"{x_end:.2}\" y1=\"{ya:.2}\" y2=\"{ya:.2}\" stroke=\"{colour}\" stroke-dasharray=\"6 3\"/><text x=\"{tx:.2}\" y=\"{ty:.2}\" fill=\"{colour}\">{label}</text>\n"
        ));
    };
    line(lb, "blue", "lower bound");
    if let Some(c) = cap {
        line(c, "red", "capacity");
    }
    out.push_str("</svg>\n");
    out
}
