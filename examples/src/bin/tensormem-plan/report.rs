//! How `tensormem-plan` reports a solution: the decision in words, the `--json` object and the
//! text lines, with the peak's ratio to the lower bound.

use tensormem::plan::Solution;

/// The three states of `feasible`, in words.
pub(crate) fn decision(s: &Solution, capacity: Option<u64>) -> &'static str {
    match (capacity, s.feasible) {
        (None, _) => "not asked (no --capacity)",
        (Some(_), Some(true)) => "met",
        (Some(_), Some(false)) => "proved infeasible",
        (Some(_), None) => "undecided (time limit reached)",
    }
}

pub(crate) fn solution_json(s: &Solution, capacity: Option<u64>) -> serde_json::Value {
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
        "exact_nodes": s.exact_nodes,
        "seconds": s.elapsed.as_secs_f64(),
        "stage_seconds": {
            "validation": s.stages.validation.as_secs_f64(),
            "first_plan": s.stages.first_plan.as_secs_f64(),
            "search": s.stages.search.as_secs_f64(),
            "final_verification": s.stages.final_verification.as_secs_f64(),
        },
    })
}

pub(crate) fn print_text(file: &str, buffers: usize, s: &Solution, capacity: Option<u64>) {
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

pub(crate) fn ratio(peak: u64, lb: u64) -> f64 {
    if lb == 0 {
        1.0
    } else {
        peak as f64 / lb as f64
    }
}

pub(crate) fn gap(peak: u64, lb: u64) -> f64 {
    ratio(peak, lb) - 1.0
}
