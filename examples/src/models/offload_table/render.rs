//! The offload table as Markdown (the README's) and as JSON.

use serde_json::{Value, json};
use tensormem::offload::Score;

use super::{Again, OffloadRow};

/// The rows as a Markdown table (the README's).
pub fn to_markdown(rows: &[OffloadRow]) -> String {
    let lanes = rows.iter().any(|r| r.lane_off.is_some());
    let swap = rows.iter().any(|r| r.swap_only.is_some());
    let mut out = String::from(
        "| seq | budget | score | chunks attention / ffn | peak device | time vs unbudgeted | to device / run | to host / run | recomputed / run (extra work) | stall predicted / measured | identical |",
    );
    let mut rule = String::from("|---|---|---|---|---|---|---|---|---|---|---|");
    if lanes {
        out += " lane off: time / stall |";
        rule += "---|";
    }
    if swap {
        out += " swap only: time / to device / to host |";
        rule += "---|";
    }
    out += "\n";
    out += &rule;
    out += "\n";
    for r in rows {
        let budget = r
            .percent
            .map_or_else(|| "none".to_string(), |p| format!("{p}%"));
        let score = match (r.score, r.won) {
            (Some(s), true) => format!("**{}** (picked)", s.name()),
            (Some(s), false) => s.name().to_string(),
            (None, _) => "-".to_string(),
        };
        if let Some(e) = &r.error {
            out += &format!(
                "| {} | {budget} | {score} | - | - | - | - | - | - | - | {e} |",
                r.seq
            );
        } else {
            out += &format!(
                "| {} | {budget} ({}) | {score} | {} / {}{} | {} | {:.2}x | {} | {} | {} ({}) | {:.1} / {:.1} ms{} | {}{} |",
                r.seq,
                mib(r.budget),
                r.chunks,
                r.ffn_chunks,
                if r.staged { " staged" } else { "" },
                mib(r.peak_device_bytes),
                r.time_ratio,
                mib(r.to_device),
                mib(r.to_host),
                mib(r.recomputed),
                mib(r.recompute_work),
                r.predicted_stall.as_secs_f64() * 1e3,
                r.stall.as_secs_f64() * 1e3,
                if r.transfer_lane && !r.lane_waits_measured {
                    " (host waits only: the backend does not time the lane)"
                } else {
                    ""
                },
                if r.identical { "yes" } else { "NO" },
                match (
                    r.unified,
                    r.transfer_lane,
                    r.direct_swap_in && r.to_host > 0
                ) {
                    (true, ..) => " (unified: nothing moves)",
                    (false, true, true) => " (transfer lane, direct swap-ins)",
                    (false, true, false) => " (transfer lane)",
                    (false, false, true) => " (direct swap-ins)",
                    (false, false, false) => "",
                },
            );
        }
        if lanes {
            out += &match &r.lane_off {
                Some(off) => format!(
                    " {:.2}x / {:.1} ms{} |",
                    off.time_ratio,
                    off.stall.as_secs_f64() * 1e3,
                    not_identical(off)
                ),
                None => " - |".to_string(),
            };
        }
        if swap {
            out += &match &r.swap_only {
                Some(Again { error: Some(e), .. }) => format!(" {e} |"),
                Some(s) => format!(
                    " {:.2}x / {} / {}{} |",
                    s.time_ratio,
                    mib(s.to_device),
                    mib(s.to_host),
                    not_identical(s)
                ),
                None => " - |".to_string(),
            };
        }
        out += "\n";
    }
    let mut rates: Vec<(f64, f64)> = rows.iter().map(|r| r.rates).filter(|r| r.0 > 0.0).collect();
    rates.dedup();
    for (link, device) in rates {
        out += &format!(
            "\nplanner rates: link {:.1} GB/s, device {:.1} GB/s (bytes an op binds)\n",
            link / 1e9,
            device / 1e9
        );
    }
    out
}

fn not_identical(a: &Again) -> &'static str {
    if a.identical { "" } else { " (NOT identical)" }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
}

fn again_json(a: Option<&Again>) -> Value {
    a.map_or(Value::Null, |a| {
        json!({
            "time_ratio": a.time_ratio,
            "stall_ms": a.stall.as_secs_f64() * 1e3,
            "bytes_to_device_per_run": a.to_device,
            "bytes_to_host_per_run": a.to_host,
            "identical": a.identical,
            "error": a.error,
        })
    })
}

/// The rows as JSON.
pub fn to_json(rows: &[OffloadRow]) -> Value {
    json!(
        rows.iter()
            .map(|r| json!({
                "batch": r.batch,
                "seq": r.seq,
                "budget_percent": r.percent,
                "score": r.score.map(Score::name),
                "attention_chunks": r.chunks,
                "ffn_chunks": r.ffn_chunks,
                "staged": r.staged,
                "budget_bytes": r.budget,
                "peak_device_bytes": r.peak_device_bytes,
                "fastest_run_ms": r.fastest.as_secs_f64() * 1e3,
                "time_ratio": r.time_ratio,
                "bytes_to_device_per_run": r.to_device,
                "bytes_to_host_per_run": r.to_host,
                "bytes_recomputed_per_run": r.recomputed,
                "recompute_work_bytes_per_run": r.recompute_work,
                "stall_ms": r.stall.as_secs_f64() * 1e3,
                "predicted_stall_ms": r.predicted_stall.as_secs_f64() * 1e3,
                "picked": r.won,
                "unified_memory": r.unified,
                "identical": r.identical,
                "error": r.error,
                "transfer_lane": r.transfer_lane,
                "lane_waits_measured": r.lane_waits_measured,
                "direct_swap_in": r.direct_swap_in,
                "planner_link_bandwidth": r.rates.0,
                "planner_device_rate": r.rates.1,
                "lane_off": again_json(r.lane_off.as_ref()),
                "swap_only": again_json(r.swap_only.as_ref()),
            }))
            .collect::<Vec<_>>()
    )
}
