//! The simulator's outputs: a text table, JSON, and an SVG of utilization and running requests
//! over time for every policy.

use std::fmt::Write as _;

use super::sim::SimResult;
use crate::cli::xml_escape;

/// One line per policy.
pub fn table(results: &[SimResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<17} {:>8} {:>8} {:>8} {:>7} {:>8} {:>9} {:>8} {:>9} {:>8} {:>7}",
        "policy",
        "util",
        "util@pk",
        "running",
        "max",
        "preempt",
        "completed",
        "steps",
        "delay",
        "seconds",
        "prefix"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:<17} {:>8.4} {:>8.4} {:>8.2} {:>7} {:>8} {:>9} {:>8} {:>9.1} {:>8.1} {:>7}",
            r.policy,
            r.utilization_mean,
            r.utilization_peak,
            r.running_mean,
            r.running_max,
            r.preemptions,
            r.completed,
            r.steps,
            r.queue_delay_mean_steps,
            r.seconds,
            r.prefix_hit_rate.map_or("-".into(), |h| format!("{h:.3}")),
        );
    }
    out
}

const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];

/// Utilization (top) and running requests (bottom) over steps, one line per policy.
pub fn svg(results: &[SimResult], title: &str) -> String {
    let (w, h, pad) = (960.0, 260.0, 50.0);
    let steps = results.iter().map(|r| r.steps).max().unwrap_or(1).max(1) as f64;
    let max_running = results
        .iter()
        .map(|r| r.running_max)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"{pad}\" y=\"20\" font-size=\"14\">{}</text>",
        2.0 * h + 60.0,
        xml_escape(title)
    );
    for (panel, (label, top)) in [
        ("KV utilization (bytes holding tokens ÷ bytes held)", 30.0),
        ("running requests", h + 50.0),
    ]
    .into_iter()
    .enumerate()
    {
        let (x0, y0, pw, ph) = (pad, top + 10.0, w - 2.0 * pad, h - 40.0);
        let _ = write!(
            out,
            "<text x=\"{x0}\" y=\"{top}\">{label}</text><rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
            x0 - 4.0,
            y0 + 10.0,
            if panel == 0 {
                "1.0".to_string()
            } else {
                format!("{max_running}")
            },
            x0 - 4.0,
            y0 + ph
        );
        for (i, r) in results.iter().enumerate() {
            let stride = (r.series.len() / 1200).max(1);
            let mut pts = String::new();
            for &(step, util, running) in r.series.iter().step_by(stride) {
                let v = if panel == 0 {
                    util
                } else {
                    running as f64 / max_running
                };
                let _ = write!(
                    pts,
                    "{:.1},{:.1} ",
                    x0 + step as f64 / steps * pw,
                    y0 + (1.0 - v) * ph
                );
            }
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1\" points=\"{pts}\"/>",
                COLORS[i % COLORS.len()]
            );
        }
    }
    for (i, r) in results.iter().enumerate() {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>",
            pad + 190.0 * i as f64,
            2.0 * h + 50.0,
            COLORS[i % COLORS.len()],
            xml_escape(&r.policy)
        );
    }
    out.push_str("</svg>\n");
    out
}
