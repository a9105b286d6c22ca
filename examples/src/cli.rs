//! Command-line pieces every tool shares, so `mnist`, `minilm` and `tensormem-report` spell the
//! same flag the same way: the device flags (`--backend`, `--timeout`), the sample flags
//! (`--json`, `--runs`), the exit codes, and progress bars that stay out of machine output.
//!
//! Exit codes: 0 success; 1 a failure while running (an unreadable or malformed input file, a model
//! that does not match its config, a device error or timeout, a non-finite result); 2 a usage
//! error (clap's own code for an unknown flag or a bad value).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use tensormem::{RuntimeConfig, WeightFormat};

use crate::backend_select::{BackendChoice, SelectOptions};

/// The exit-code paragraph of every tool's `--help`.
pub const EXIT_CODES: &str = "Exit status:\n  0  success\n  1  failure while running: unreadable \
     or malformed input, a model that disagrees with its config, a device error or timeout, a \
     non-finite result\n  2  usage error (unknown flag, bad value)";

/// Flags of every tool that runs on a device.
#[derive(Args, Clone, Debug)]
pub struct DeviceArgs {
    /// Backend to run on. `auto` takes a hardware GPU (discrete, then integrated), else the host
    /// CPU; software GPU implementations (lavapipe, llvmpipe, SwiftShader) only when named.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Seconds one device wait may block before the run fails (0: no limit), on every backend:
    /// the runtime's waits (`RuntimeConfig::wait_timeout`) and the backends' own.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_timeout)]
    pub timeout: WaitTimeout,
}

impl DeviceArgs {
    /// The options backends are created with.
    pub fn select_options(&self) -> SelectOptions {
        SelectOptions {
            wait_timeout: self.timeout.0,
        }
    }

    /// The runtime configuration these flags ask for: the wait limit (no limit is
    /// `Duration::MAX`, since `None` would defer to each backend's own default).
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            wait_timeout: Some(self.timeout.0.unwrap_or(Duration::MAX)),
            ..RuntimeConfig::default()
        }
    }
}

/// Flags of the sample inference executables.
#[derive(Args, Clone, Debug)]
pub struct SampleArgs {
    /// Device flags.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Print one JSON object on stdout instead of text (no progress bars).
    #[arg(long)]
    pub json: bool,
    /// Timed runs after one warm-up, for the time per inference in the report.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Weight flags.
    #[command(flatten)]
    pub weights: WeightArgs,
    /// Device memory the model may use: bytes with an optional unit (1048576, 500MB, 64MiB,
    /// 1.5GiB) or a percentage of what the model needs without a budget (50%). Tensors that do
    /// not fit leave device memory between uses and are prefetched back; outputs are identical.
    /// A budget below one op's operands fails (exit 1) naming that op.
    #[arg(long, value_name = "SIZE", value_parser = parse_device_budget)]
    pub device_budget: Option<DeviceBudget>,
}

/// How a sample holds its weights on the device.
#[derive(Args, Clone, Debug)]
pub struct WeightArgs {
    /// Format of the matmul, convolution and embedding weights on the device: f32, f16 (half the
    /// bytes), int8 (a quarter, plus one f32 scale per output channel or group) or int8-dynamic
    /// (stored as int8; matmuls also quantise their activations and multiply integers, the
    /// fastest on CPUs). Converted at load when the weight file stores another format (see
    /// tensormem-quantize).
    #[arg(long = "weights", value_enum, default_value_t = WeightChoice::F32)]
    pub format: WeightChoice,
    /// With --weights int8 or int8-dynamic: inner elements per scale (0: one scale per output
    /// channel).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub group: u32,
    /// Weight file to load instead of the model's own (e.g. one written by tensormem-quantize).
    #[arg(long, value_name = "FILE")]
    pub weights_file: Option<PathBuf>,
}

/// `--weights` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum WeightChoice {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// Symmetric int8 with f32 scales.
    Int8,
    /// Int8 weights, and each matmul's activations quantised to int8 per row as it runs: integer
    /// products (several times faster than f32 on CPUs with VNNI), at a rounding of the
    /// activations.
    Int8Dynamic,
}

impl WeightArgs {
    /// The chosen format.
    pub fn format(&self) -> WeightFormat {
        match self.format {
            WeightChoice::F32 => WeightFormat::F32,
            WeightChoice::F16 => WeightFormat::F16,
            WeightChoice::Int8 => WeightFormat::Int8 { group: self.group },
            WeightChoice::Int8Dynamic => WeightFormat::Int8Dynamic { group: self.group },
        }
    }
}

/// A device budget as given on the command line.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum DeviceBudget {
    /// A number of bytes.
    Bytes(u64),
    /// A percentage of the model's device bytes without a budget.
    Percent(f64),
}

impl DeviceBudget {
    /// The budget in bytes for a model that needs `unbudgeted` device bytes without one
    /// ([`MemoryReport::unbudgeted_device_bytes`](tensormem::MemoryReport::unbudgeted_device_bytes)).
    pub fn resolve(self, unbudgeted: u64) -> u64 {
        match self {
            DeviceBudget::Bytes(b) => b,
            DeviceBudget::Percent(p) => (unbudgeted as f64 * p / 100.0) as u64,
        }
    }

    /// The budget in bytes where no model is at hand to take a percentage of: none stays none,
    /// and a percentage is refused, `expected` saying what `--device-budget` takes there.
    ///
    /// # Errors
    /// [`tensormem::ArgumentError`] for a percentage.
    pub fn bytes_only(budget: Option<Self>, expected: &str) -> tensormem::Result<Option<u64>> {
        budget
            .map(|b| b.bytes("--device-budget", expected))
            .transpose()
    }

    /// The budget in bytes that `flag` gave where a percentage has nothing to be taken of:
    /// a percentage is refused, `expected` saying what `flag` takes there.
    ///
    /// # Errors
    /// [`tensormem::ArgumentError`] for a percentage.
    pub fn bytes(self, flag: &str, expected: &str) -> tensormem::Result<u64> {
        match self {
            DeviceBudget::Bytes(b) => Ok(b),
            DeviceBudget::Percent(_) => {
                Err(tensormem::ArgumentError::invalid_value(flag, "a percentage", expected).into())
            }
        }
    }
}

/// Parses `--device-budget SIZE`: `N`, `N<unit>` with unit B, KB, MB, GB (powers of 1000) or K,
/// KiB, M, MiB, G, GiB (powers of 1024), fractions allowed, or `P%` with 0 < P <= 100.
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_device_budget(s: &str) -> Result<DeviceBudget, String> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': not a percentage"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!(
                "'{s}': a percentage must be above 0 and at most 100"
            ));
        }
        return Ok(DeviceBudget::Percent(p));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        u => {
            return Err(format!(
                "'{s}': unknown unit '{u}' (B, KB, MB, GB, KiB, MiB, GiB or %)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}': expected a size such as 64MiB or 50%"))?;
    let bytes = v * scale as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!(
            "'{s}': a budget must be at least 1 byte and fit in 64 bits"
        ));
    }
    Ok(DeviceBudget::Bytes(bytes as u64))
}

/// Compiles `graph` on `rt`, within `budget` when one is given: a percentage is resolved against
/// the bytes an unbudgeted compile of the same graph needs.
///
/// # Errors
/// Compile errors; [`tensormem::Error::BudgetBelowWorkingSet`] naming the op that cannot fit.
pub fn compile(
    rt: &tensormem::Runtime,
    graph: &tensormem::Graph,
    budget: Option<DeviceBudget>,
) -> tensormem::Result<tensormem::Model> {
    let opts = CompileOptions::default();
    compile_scored(rt, graph, budget, &tensormem::offload::Score::ALL, opts)
}

/// How [`compile_scored`] compiles within a budget, beside the scores.
#[derive(Copy, Clone, Debug)]
pub struct CompileOptions {
    /// The copies go on the transfer lane (`CompileDesc::transfer_lane`).
    pub transfer_lane: bool,
    /// Activations may be recomputed (`CompileDesc::recompute`).
    pub recompute: bool,
    /// Where the planner's rates come from (`CompileDesc::rates`).
    pub rates: tensormem::Rates,
}

impl Default for CompileOptions {
    /// The lane on, recompute on, the planner's default rates.
    fn default() -> Self {
        CompileOptions {
            transfer_lane: true,
            recompute: true,
            rates: tensormem::Rates::Default,
        }
    }
}

/// [`compile`] trying only the offload `scores` given (the benchmark compares them one by one),
/// as `opts` says (the copies on the transfer lane or not, recompute or swap only, the rates).
///
/// # Errors
/// As [`compile`].
pub fn compile_scored(
    rt: &tensormem::Runtime,
    graph: &tensormem::Graph,
    budget: Option<DeviceBudget>,
    scores: &[tensormem::offload::Score],
    opts: CompileOptions,
) -> tensormem::Result<tensormem::Model> {
    let Some(budget) = budget else {
        return rt.compile(graph);
    };
    let need = match budget {
        DeviceBudget::Bytes(_) => 0,
        DeviceBudget::Percent(_) => rt.memory_need(graph)?.unbudgeted_device_bytes(),
    };
    rt.compile_with(
        graph,
        &tensormem::CompileDesc {
            device_budget: Some(budget.resolve(need)),
            scores: scores.to_vec(),
            transfer_lane: opts.transfer_lane,
            recompute: opts.recompute,
            rates: opts.rates,
            ..tensormem::CompileDesc::default()
        },
    )
}

/// A device-wait limit: `None` waits forever.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WaitTimeout(pub Option<Duration>);

/// Parses `--timeout SECS`: a finite number of seconds ≥ 0 (fractions allowed), 0 for no limit.
///
/// # Errors
/// A message for clap when `s` is not such a number.
pub fn parse_timeout(s: &str) -> Result<WaitTimeout, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("'{s}': expected seconds >= 0 (0 for no limit)"));
    }
    if secs == 0.0 {
        return Ok(WaitTimeout(None));
    }
    Duration::try_from_secs_f64(secs)
        .map(|d| WaitTimeout(Some(d)))
        .map_err(|e| format!("'{s}': {e}"))
}

/// A progress bar on stderr for `len` steps of `what`, or a hidden one when `quiet` (`--json`) or
/// when stderr is not a terminal, so pipes and logs never see bar redraws.
pub fn progress(len: u64, what: &str, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), draw_target(quiet));
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>12} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// A spinner on stderr for work of unknown length, hidden as [`progress`]'s bars are.
pub fn spinner(what: &str, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, draw_target(quiet));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed_precise}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Stderr when it is a terminal and output is not quiet; nowhere otherwise.
fn draw_target(quiet: bool) -> ProgressDrawTarget {
    if quiet || !std::io::stderr().is_terminal() {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    }
}

/// `writeln!` into a `String` output buffer (writing to a `String` cannot fail). The tools build
/// their whole stdout output this way, then [`emit`] it.
#[macro_export]
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// `s` with `&`, `<` and `>` escaped for XML text (the tools' SVG labels).
pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes `out` to stdout at once. A closed pipe (`mnist | head -1`) ends the output quietly,
/// where `println!` would panic.
pub fn emit(out: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Prints `tool: error` on stderr and returns exit code 1 (a failure while running).
pub fn fail(tool: &str, error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("{tool}: {error}");
    ExitCode::FAILURE
}

/// The exit code of a tool's run: 0 when it succeeded, else [`fail`]'s with its error.
pub fn exit<E: std::fmt::Display>(tool: &str, result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(tool, &e),
    }
}

/// Writes `contents` to the file `path` a flag named (an output, a trace, an SVG).
///
/// # Errors
/// [`tensormem::Error::Io`] naming the file.
pub fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> tensormem::Result<()> {
    std::fs::write(path, contents).map_err(|source| tensormem::Error::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests;
