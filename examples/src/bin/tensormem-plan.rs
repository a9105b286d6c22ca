//! `tensormem-plan`: plan a DSA instance from CSV and report how close the plan is to optimal.
//!
//! ```text
//! tensormem-plan FILE.csv [--capacity N] [--time-limit SECS] [--seed N]
//!                [--out PLAN.csv] [--svg PLAN.svg] [--json]
//! ```
//! Input is MiniMalloc's CSV `id,lower,upper,size[,alignment][,offset]` (half-open lifetimes). The
//! tool prints the buffer count, lower bound, peak, peak / lower bound, the greedy-by-size peak,
//! whether the capacity was met or proved infeasible, and the time taken (`--json`: one object).
//! If the input carries offsets, they are verified and reported too. Progress of long searches
//! goes to stderr. Exit status: 0 success, 1 error (bad input, I/O), 2 usage, 3 capacity not met.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tensormem::plan::{Buffer, Plan, Progress, SolveOptions, parse_csv, solve, verify, write_csv};
use tensormem::{Error, Result};

const USAGE: &str = "usage: tensormem-plan FILE.csv [--capacity N] [--time-limit SECS] [--seed N] \
                     [--out PLAN.csv] [--svg PLAN.svg] [--json]";

struct Args {
    file: String,
    capacity: Option<u64>,
    time_limit: Duration,
    seed: u64,
    out: Option<String>,
    svg: Option<String>,
    json: bool,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut parsed = Args {
        file: String::new(),
        capacity: None,
        time_limit: Duration::from_secs(10),
        seed: 0,
        out: None,
        svg: None,
        json: false,
    };
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--capacity" => {
                let v = value("--capacity")?;
                parsed.capacity = Some(
                    v.parse()
                        .map_err(|_| format!("--capacity: `{v}` is not a byte count"))?,
                );
            }
            "--time-limit" => {
                let v = value("--time-limit")?;
                let secs: f64 = v
                    .parse()
                    .map_err(|_| format!("--time-limit: `{v}` is not a number of seconds"))?;
                parsed.time_limit = Duration::try_from_secs_f64(secs)
                    .map_err(|_| format!("--time-limit: {secs} is not a valid duration"))?;
            }
            "--seed" => {
                let v = value("--seed")?;
                parsed.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: `{v}` is not an integer"))?;
            }
            "--out" => parsed.out = Some(value("--out")?),
            "--svg" => parsed.svg = Some(value("--svg")?),
            "--json" => parsed.json = true,
            "-h" | "--help" => return Err(String::new()),
            f if f.starts_with('-') => return Err(format!("unknown option `{f}`")),
            f => {
                if file.replace(f.to_string()).is_some() {
                    return Err("more than one input file".into());
                }
            }
        }
    }
    parsed.file = file.ok_or("missing input FILE.csv")?;
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            if msg.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("tensormem-plan: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(met) => {
            if met {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }
        Err(e) => {
            eprintln!("tensormem-plan: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn io_err(path: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_string(),
        source,
    }
}

/// Plans the file; returns whether the capacity (if any) was met.
fn run(args: &Args) -> Result<bool> {
    let text = std::fs::read_to_string(&args.file).map_err(io_err(&args.file))?;
    let inst = parse_csv(&text, &args.file)?;
    let input_plan = match &inst.offsets {
        Some(offsets) => {
            let plan = Plan::from_offsets(&inst.buffers, offsets.clone());
            let verdict = verify(&inst.buffers, &plan, args.capacity);
            Some((plan.peak, verdict.map_err(|e| e.to_string())))
        }
        None => None,
    };
    let json = args.json;
    let progress: Arc<dyn Fn(&Progress) + Send + Sync> = Arc::new(move |p: &Progress| {
        if p.elapsed >= Duration::from_millis(200) || !json {
            eprintln!(
                "[{:7.3} s] {}: best peak {} ({:+.4}% over the lower bound)",
                p.elapsed.as_secs_f64(),
                p.phase,
                p.best_peak,
                gap(p.best_peak, p.lower_bound) * 100.0
            );
        }
    });
    let opts = SolveOptions {
        time_limit: args.time_limit,
        capacity: args.capacity,
        seed: args.seed,
        progress: Some(progress),
    };
    let s = solve(&inst.buffers, &opts)?;
    if let Some(path) = &args.out {
        match &s.plan {
            Some(plan) => {
                let csv = write_csv(&inst.ids, &inst.buffers, Some(&plan.offsets))?;
                std::fs::write(path, csv).map_err(io_err(path))?;
            }
            None => eprintln!("tensormem-plan: no plan within the capacity; {path} not written"),
        }
    }
    if let Some(path) = &args.svg {
        match &s.plan {
            Some(plan) => {
                let svg = draw_svg(&inst.ids, &inst.buffers, plan, s.lower_bound, args.capacity);
                std::fs::write(path, svg).map_err(io_err(path))?;
            }
            None => eprintln!("tensormem-plan: no plan within the capacity; {path} not written"),
        }
    }
    let seconds = s.elapsed.as_secs_f64();
    if args.json {
        let mut obj = serde_json::json!({
            "file": args.file,
            "buffers": inst.buffers.len(),
            "lower_bound": s.lower_bound,
            "peak": s.best_peak,
            "peak_over_lower_bound": ratio(s.best_peak, s.lower_bound),
            "greedy_peak": s.greedy_peak,
            "greedy_over_lower_bound": ratio(s.greedy_peak, s.lower_bound),
            "capacity": args.capacity,
            "feasible": s.feasible,
            "proved_optimal": s.proved_optimal,
            "algorithm": s.algorithm,
            "seconds": seconds,
        });
        if let Some((peak, verdict)) = &input_plan {
            obj["input_plan"] = serde_json::json!({
                "peak": peak,
                "valid": verdict.is_ok(),
                "error": verdict.as_ref().err(),
            });
        }
        println!("{obj}");
    } else {
        println!("file:           {}", args.file);
        println!("buffers:        {}", inst.buffers.len());
        println!("lower bound:    {} bytes", s.lower_bound);
        println!(
            "peak:           {} bytes (peak / lower bound = {:.6})",
            s.best_peak,
            ratio(s.best_peak, s.lower_bound)
        );
        println!(
            "greedy by size: {} bytes (greedy / lower bound = {:.6}; ours is {:.3}% lower)",
            s.greedy_peak,
            ratio(s.greedy_peak, s.lower_bound),
            (1.0 - s.best_peak as f64 / s.greedy_peak.max(1) as f64) * 100.0
        );
        if let Some(cap) = args.capacity {
            let verdict = match s.feasible {
                Some(true) => "met",
                Some(false) => "proved infeasible",
                None => "undecided (time limit reached)",
            };
            println!("capacity:       {cap} bytes: {verdict}");
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
        if let Some((peak, verdict)) = &input_plan {
            match verdict {
                Ok(()) => println!("input plan:     valid, peak {peak} bytes"),
                Err(e) => println!("input plan:     INVALID: {e}"),
            }
        }
        println!("time:           {seconds:.3} s");
    }
    Ok(s.plan.is_some())
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

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
