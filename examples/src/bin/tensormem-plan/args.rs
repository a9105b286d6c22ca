//! The command line of `tensormem-plan`: its subcommands and flags (clap derive), the exit codes
//! its `--help` lists, and the flag value parsers.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tensormem::plan::{MAX_THREADS, PackingFamily};

pub(crate) const EXIT_CODES: &str = "\
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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Solve generated perfect packings (optimum = capacity) and print solved counts and times.
    Sweep(SweepArgs),
    /// Write one generated perfect packing as CSV, with the witness offsets (or, with `--random`,
    /// an instance with random lifetimes).
    Generate(GenerateArgs),
    /// Run greedy by size alone, to the end, without a time limit (minutes at 10^6 buffers): the
    /// baseline the planner's limited answer is measured against. The plan is verified.
    Greedy(GreedyArgs),
    /// Decide each file at the capacity its name gives (MiniMalloc's `NAME.CAPACITY.csv`, as in
    /// `shared/data/traces/minimalloc-challenging/`) and print one row each: decided or not,
    /// seconds, exact-search nodes.
    Decide(DecideArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DecideArgs {
    /// Instances named `NAME.CAPACITY.csv`, decided one after the other.
    #[arg(required = true)]
    pub(crate) files: Vec<String>,
    #[command(flatten)]
    pub(crate) solver: SolverArgs,
    /// Print one JSON object per file instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GreedyArgs {
    /// Instance, as for planning.
    pub(crate) file: String,
    /// Gap rule: the best-fitting gap (TFLite) or the lowest one that fits (XLA's newer option).
    #[arg(long, value_enum, default_value = "best")]
    pub(crate) fit: FitArg,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FitArg {
    Best,
    Lowest,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Instance: `id,lower,upper,size[,alignment][,offset]` per line (offsets, if present, are
    /// verified and reported).
    pub(crate) file: Option<String>,
    /// Decision form: decide whether a plan with peak <= N bytes exists, then lower the peak.
    #[arg(long, value_name = "N")]
    pub(crate) capacity: Option<u64>,
    #[command(flatten)]
    pub(crate) solver: SolverArgs,
    /// Write the plan as CSV (ids, lifetimes, sizes, offsets).
    #[arg(long, value_name = "PLAN.csv")]
    pub(crate) out: Option<String>,
    /// Draw the plan as SVG (time right, address up).
    #[arg(long, value_name = "PLAN.svg")]
    pub(crate) svg: Option<String>,
    /// Print one JSON object instead of text; `feasible` is true, false or null (see below).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SolverArgs {
    /// Wall-clock limit of the planning (parsing excluded), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = seconds)]
    pub(crate) time_limit: f64,
    /// Seed of the randomised heuristics.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Portfolio threads, 0 to 1024; 0 = every core, and counts above the cores run on the cores.
    /// Results depend on the count, not on timing.
    #[arg(long, default_value_t = 0, value_parser = threads)]
    pub(crate) threads: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Family {
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
pub(crate) struct ShapeArgs {
    /// Rectangle height in bytes: the capacity and the optimal peak.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub(crate) capacity: u64,
    /// Rectangle width in time steps.
    #[arg(long, value_name = "STEPS", default_value_t = 1000)]
    pub(crate) horizon: u64,
    /// Byte granularity of sizes and offsets.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub(crate) grid: u64,
}

/// The sweep: `sweep` (1000 steps × 1 MiB, 1 KiB grid, n = 100..300, 10 seeds). The
/// MiniMalloc-style hard sets: `sweep --horizon 1048576 --family pinwheel --counts
/// 150,200,250,300,350,400,450`.
#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Families to sweep (repeat or comma-separate).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "guillotine")]
    pub(crate) family: Vec<Family>,
    /// Buffer counts.
    #[arg(long, value_delimiter = ',', default_value = "100,150,200,250,300")]
    pub(crate) counts: Vec<usize>,
    /// Seeds per count (0, 1, ...).
    #[arg(long, default_value_t = 10)]
    pub(crate) seeds: u64,
    #[command(flatten)]
    pub(crate) shape: ShapeArgs,
    #[command(flatten)]
    pub(crate) solver: SolverArgs,
    /// Print one JSON object per row instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// Number of buffers.
    #[arg(long)]
    pub(crate) count: usize,
    /// Write random lifetimes and sizes instead (no witness, no known optimum): starts uniform in
    /// [0, count), lifetimes 1 to 10^4 steps, sizes 64 B to 1 MiB, about 5,000 live at a time;
    /// the large instances the time limits are measured on.
    #[arg(long, conflicts_with_all = ["family", "capacity", "horizon", "grid"])]
    pub(crate) random: bool,
    #[arg(long, value_enum, default_value = "guillotine")]
    pub(crate) family: Family,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) shape: ShapeArgs,
    /// Output file (default: stdout).
    #[arg(short, long, value_name = "FILE.csv")]
    pub(crate) out: Option<String>,
}

pub(crate) fn seconds(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(v)
        .map(|_| v)
        .map_err(|_| format!("{v} is not a valid duration"))
}

pub(crate) fn threads(s: &str) -> std::result::Result<usize, String> {
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
