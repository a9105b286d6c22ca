//! `tensormem-report`: reads a trace written by `tensormem::trace` (Chrome trace JSON with the raw
//! events embedded) and prints the memory inefficiencies it finds, largest peak saving first.
//! `tensormem-report --help` lists the flags and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tensormem::trace::{AnalyzeOptions, Finding, analyze};
use tensormem::{Error, Trace};
use tensormem_examples::cli::{self, EXIT_CODES, emit};
use tensormem_examples::outln;

/// Find memory inefficiencies in a tensormem trace (early allocation, late free, idle or
/// over-sized allocations, leaks), largest peak saving first, and optionally write the
/// self-contained HTML memory timeline.
///
/// Traces come from `tensormem::Tracer` (`mnist --trace OUT.json` writes one).
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    /// The trace (Chrome trace JSON written by tensormem).
    #[arg(value_name = "TRACE.json")]
    trace: PathBuf,
    /// Also write the self-contained HTML memory timeline to this file.
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
    /// Print the findings as a JSON array on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Report findings that save no peak bytes only when their wasted interval lasts at least
    /// this many nanoseconds.
    #[arg(long, value_name = "N", default_value_t = AnalyzeOptions::default().min_gap_ns)]
    min_gap_ns: u64,
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

fn run(args: &Args) -> Result<(), Error> {
    let name = args.trace.display().to_string();
    let busy = cli::spinner(&format!("reading {name}"), args.json);
    let text = std::fs::read_to_string(&args.trace).map_err(|source| Error::Io {
        path: name.clone(),
        source,
    })?;
    let trace = Trace::from_json(&text, &name)?;
    busy.set_message(format!("analysing {} events", trace.events.len()));
    let options = AnalyzeOptions {
        min_gap_ns: args.min_gap_ns,
        ..AnalyzeOptions::default()
    };
    let findings = analyze(&trace, &options);
    busy.finish_and_clear();
    let mut out = String::new();
    if let Some(path) = &args.html {
        let title = format!("tensormem memory timeline: {name}");
        cli::write_file(path, trace.to_html(&title))?;
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
        name,
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
    if let Some(kv) = trace.kv_summary() {
        outln!(
            out,
            "kv cache: peak {} blocks used ({} with cached prefixes), {} tokens; {} prefix hits, \
             {} blocks swapped",
            kv.peak_used,
            kv.peak_held,
            kv.peak_tokens,
            kv.hits,
            kv.swapped
        );
    }
    if let Some(path) = &args.html {
        outln!(out, "timeline written to {}", path.display());
    }
    emit(&out);
    Ok(())
}

fn main() -> ExitCode {
    cli::exit("tensormem-report", run(&Args::parse()))
}
