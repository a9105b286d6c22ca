//! `tensormem-report`: reads a trace written by `tensormem::trace` (Chrome trace JSON with the raw
//! events embedded) and prints the memory inefficiencies it finds, largest peak saving first.
//!
//! ```text
//! tensormem-report TRACE.json [--html OUT.html] [--json] [--min-gap-ns N]
//! ```
//!
//! `--html` also writes the self-contained HTML memory timeline; `--json` prints the findings as a
//! JSON array instead of a table. Exit status 0 on success, 1 on a bad file, 2 on bad arguments.

use std::process::ExitCode;

use tensormem::trace::{AnalyzeOptions, Finding, analyze};
use tensormem::{Error, Trace};

const USAGE: &str =
    "usage: tensormem-report TRACE.json [--html OUT.html] [--json] [--min-gap-ns N]";

struct Args {
    trace: String,
    html: Option<String>,
    json: bool,
    options: AnalyzeOptions,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut trace = None;
    let mut html = None;
    let mut json = false;
    let mut options = AnalyzeOptions::default();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--html" => html = Some(it.next().ok_or("--html needs a file name")?),
            "--json" => json = true,
            "--min-gap-ns" => {
                let v = it.next().ok_or("--min-gap-ns needs a number")?;
                options.min_gap_ns = v
                    .parse()
                    .map_err(|_| format!("--min-gap-ns: '{v}' is not a number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option '{s}'")),
            s if trace.is_none() => trace = Some(s.to_string()),
            s => return Err(format!("unexpected argument '{s}'")),
        }
    }
    Ok(Args {
        trace: trace.ok_or("no trace file given")?,
        html,
        json,
        options,
    })
}

fn esc(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

fn finding_json(f: &Finding) -> String {
    format!(
        "{{\"kind\":\"{}\",\"id\":{},\"label\":\"{}\",\"pool\":\"{}\",\"size\":{},\"saved\":{},\"wasted\":{},\"from_event\":{},\"to_event\":{},\"duration_ns\":{},\"detail\":\"{}\"}}",
        f.kind.name(),
        f.id,
        esc(&f.label),
        esc(&f.pool),
        f.size,
        f.saved,
        f.wasted,
        f.steps.0,
        f.steps.1,
        f.duration_ns,
        esc(&f.detail)
    )
}

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Writes the whole output at once; a closed pipe (`| head`) is not an error worth a message.
fn emit(out: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}

fn run(args: &Args) -> Result<(), Error> {
    let text = std::fs::read_to_string(&args.trace).map_err(|source| Error::Io {
        path: args.trace.clone(),
        source,
    })?;
    let trace = Trace::from_json(&text, &args.trace)?;
    let findings = analyze(&trace, &args.options);
    let mut out = String::new();
    if let Some(path) = &args.html {
        std::fs::write(
            path,
            trace.to_html(&format!("tensormem memory timeline: {}", args.trace)),
        )
        .map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
    }
    if args.json {
        let items: Vec<String> = findings.iter().map(finding_json).collect();
        outln!(out, "[\n{}\n]", items.join(",\n"));
        emit(&out);
        return Ok(());
    }
    outln!(
        out,
        "{}: {} events, {} allocations, {} finding(s), largest peak saving first",
        args.trace,
        trace.events.len(),
        trace.lifetimes().len(),
        findings.len()
    );
    if !findings.is_empty() {
        outln!(
            out,
            "{:>12}  {:>12}  {:<19} {:<16} allocation: detail",
            "saves (B)",
            "size (B)",
            "kind",
            "pool"
        );
    }
    for f in &findings {
        let label = if f.label.is_empty() {
            "<unlabelled>"
        } else {
            &f.label
        };
        outln!(
            out,
            "{:>12}  {:>12}  {:<19} {:<16} {label}: {}",
            f.saved,
            f.size,
            f.kind.name(),
            f.pool,
            f.detail
        );
        if let Some(bt) = &f.backtrace {
            for line in bt.lines().take(12) {
                outln!(out, "{:>46}{line}", "");
            }
        }
    }
    if let Some(path) = &args.html {
        outln!(out, "timeline written to {path}");
    }
    emit(&out);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("tensormem-report: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tensormem-report: {e}");
            ExitCode::from(1)
        }
    }
}
