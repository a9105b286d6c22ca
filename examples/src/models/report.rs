//! The memory and timing report both samples print at the end (text, or JSON with `--json`).
//!
//! Time per inference is measured over repeated runs of the same input after one warm-up run; each
//! timed run uploads the inputs, runs the graph and reads the output back, so a backend's
//! asynchronous queue cannot hide work.
//! The same loop checks the runtime's promise for steady state: repeated runs of one shape
//! allocate no new backend block.

use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{Value, json};
use tensormem::{MemoryReport, Model, Result, Runtime};

use super::host_memory::PhaseMeter;
use crate::backend_select::Selection;

/// Timed repeated runs of one shape.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Timed runs (after one warm-up).
    pub runs: u32,
    /// Mean time per inference.
    pub mean: Duration,
    /// Median time per inference (the mean's warm-up outliers left aside).
    pub median: Duration,
    /// Fastest run.
    pub min: Duration,
    /// Backend blocks allocated during the timed runs (0 in steady state).
    pub steady_state_new_blocks: u64,
}

/// Runs `infer` on `state` once to warm up, then `runs` more times, timing each and counting the
/// backend blocks `blocks_allocated` reports as allocated meanwhile. `bar` advances once per
/// timed run (pass a hidden bar for none) and is cleared at the end.
///
/// # Errors
/// The first error of `infer`.
pub fn time_runs<S>(
    runs: u32,
    state: &mut S,
    mut infer: impl FnMut(&mut S) -> Result<()>,
    blocks_allocated: impl Fn(&S) -> u64,
    bar: &ProgressBar,
) -> Result<Timing> {
    infer(state)?;
    let before = blocks_allocated(state);
    let runs = runs.max(1);
    let mut times = Vec::with_capacity(runs as usize);
    bar.set_length(u64::from(runs));
    for _ in 0..runs {
        let start = Instant::now();
        infer(state)?;
        times.push(start.elapsed());
        bar.inc(1);
    }
    bar.finish_and_clear();
    times.sort_unstable();
    let mid = times.len() / 2;
    let median = if times.len() % 2 == 1 {
        times[mid]
    } else {
        (times[mid - 1] + times[mid]) / 2
    };
    Ok(Timing {
        runs,
        mean: times.iter().sum::<Duration>() / runs,
        median,
        min: times[0],
        steady_state_new_blocks: blocks_allocated(state).saturating_sub(before),
    })
}

/// Backend blocks (device and staging) the runtime of `model` has allocated so far: the counter
/// [`time_runs`] watches for steady state.
pub fn blocks_allocated(model: &Model) -> u64 {
    let m = model.memory_report();
    m.device_blocks_allocated + m.staging_blocks_allocated
}

/// Everything the samples report about one compiled model.
#[derive(Clone, Debug)]
pub struct InferenceReport {
    /// Backend name ("host", "vulkan", ...).
    pub backend: String,
    /// Device name as the driver reports it.
    pub device: String,
    /// How the backend was chosen, as text lines (see [`Selection::to_text`]).
    pub selection_text: String,
    /// The same as JSON (see [`Selection::to_json`]).
    pub selection_json: Value,
    /// Shape description ("batch 3", "batch 2 x seq 15").
    pub shape: String,
    /// The compiled model's memory report.
    pub memory: MemoryReport,
    /// Timing of repeated runs.
    pub timing: Timing,
    /// The process's peak resident host memory so far (`VmHWM` of `/proc/self/status`; `None`
    /// where the platform has no such file). Loading, uploads and runs included.
    pub peak_host_bytes: Option<u64>,
    /// Host memory per phase of the run, when the sample measured it ([`InferenceReport::with_phases`]).
    pub phases: Option<PhaseMeter>,
}

/// The process's resident-set high-water mark in bytes (Linux `VmHWM`), if known.
pub fn peak_host_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl InferenceReport {
    /// Collects the report of `model` on `rt`, whose backend `selection` chose.
    pub fn new(
        rt: &Runtime,
        selection: &Selection,
        model: &Model,
        shape: String,
        timing: Timing,
    ) -> Self {
        let caps = rt.backend().capabilities();
        InferenceReport {
            backend: caps.backend.to_string(),
            device: caps.device_name.clone(),
            selection_text: selection.to_text(),
            selection_json: selection.to_json(),
            shape,
            memory: model.memory_report(),
            timing,
            peak_host_bytes: peak_host_bytes(),
            phases: None,
        }
    }

    /// Adds the host memory phases `meter` measured. The meter resets the high-water mark at each
    /// phase, so the run's peak is the largest of its phases' peaks and the mark since.
    pub fn with_phases(mut self, meter: PhaseMeter) -> Self {
        self.peak_host_bytes = self.peak_host_bytes.max(meter.peak());
        self.phases = Some(meter);
        self
    }

    /// The offload lines of the text report (empty without a device budget).
    fn offload_text(&self) -> String {
        let m = &self.memory;
        let Some(o) = &m.offload else {
            return String::new();
        };
        let scores: Vec<String> = o
            .outcomes
            .iter()
            .map(|s| match s.peak {
                Some(_) => format!(
                    "{} {} moved, stall {:.3} ms",
                    s.score.name(),
                    bytes(s.bytes_to_device + s.bytes_to_host),
                    s.predicted_stall.as_secs_f64() * 1e3
                ),
                None => format!("{} no schedule", s.score.name()),
            })
            .collect();
        let runs = m.runs.max(1);
        format!(
            "\n\x20 device budget                {budget}\n\
             \x20 peak device bytes            {peak} (measured by the pool; schedule {planned})\n\
             \x20 offload schedule             {score} score won{unified}; predicted per run: {scores}\n\
             \x20 bytes moved per run          {to_dev} to device, {to_host} to host\n\
             \x20 recomputed per run           {recomputed} (the re-run ops bound {work})\n\
             \x20 stall (last run)             {stall:.3} ms waiting for copies ({waits})\n\
             \x20 runtime device account       {account} reserved (this model included), limit {limit}",
            budget = bytes(o.budget),
            peak = bytes(m.peak_device_bytes),
            planned = bytes(o.planned_peak),
            score = o.score,
            unified = if o.unified {
                " (unified memory: nothing moves)"
            } else {
                ""
            },
            scores = scores.join("; "),
            to_dev = bytes(o.bytes_to_device / runs),
            to_host = bytes(o.bytes_to_host / runs),
            recomputed = bytes(o.bytes_recomputed / runs),
            work = bytes(o.recompute_work / runs),
            stall = o.last_stall.as_secs_f64() * 1e3,
            waits = if o.lane_waits_measured {
                "host waits and the compute lane's device-side waits"
            } else if o.transfer_lane {
                "host waits; this backend does not time the lane's waits"
            } else {
                "host waits; copies ran between kernels"
            },
            account = bytes(m.runtime_reserved_bytes),
            limit = m.runtime_limit.map_or_else(|| "none".to_string(), bytes),
        )
    }

    /// The report as human-readable lines.
    pub fn to_text(&self) -> String {
        let m = &self.memory;
        let t = &self.timing;
        let steady = if t.steady_state_new_blocks == 0 {
            "none (steady state)".to_string()
        } else {
            format!("{} (NOT steady)", t.steady_state_new_blocks)
        };
        let ratio = |a: u64, b: u64| {
            if b == 0 {
                String::from("-")
            } else {
                format!("{:.2}x", a as f64 / b as f64)
            }
        };
        format!(
            "{selection}\n\
             memory report ({backend} backend, {device}, {shape})\n\
             \x20 weights                      {wb}  ({by_dtype})\n\
             \x20 weight store (runtime)       {ws}, {wt} tensors, {wr} model bindings\n\
             \x20 activations with the plan    {ap}  ({r_lb} of the lower bound)\n\
             \x20 activations without reuse    {an}  ({r_nr} of the plan)\n\
             \x20 activations lower bound      {al}\n\
             \x20 plan                         {algo}, {buffers} buffers (greedy by size: {greedy})\n\
             \x20 backend blocks allocated     {dev_blocks} device, {st_blocks} staging\n\
             \x20 staging bytes moved          {st}\n\
             \x20 host memory placement        {host_memory}\n\
             \x20 time per inference           {mean:.3} ms (mean of {runs}, median {median:.3}, min {min:.3} ms)\n\
             \x20 new blocks in repeated runs  {steady}\n\
             \x20 device pool peak             {peak_res} reserved for {peak_live} live ({r_pool})\n\
             \x20 peak host memory (VmHWM)     {hwm}{offload}",
            selection = self.selection_text,
            backend = self.backend,
            device = self.device,
            shape = self.shape,
            wb = bytes(m.weight_bytes),
            by_dtype = m
                .weight_bytes_by_dtype
                .iter()
                .map(|(d, b)| format!("{} {}", d.name(), bytes(*b)))
                .collect::<Vec<_>>()
                .join(", "),
            ws = bytes(m.weight_store.bytes),
            wt = m.weight_store.tensors,
            wr = m.weight_store.references,
            ap = bytes(m.activation_planned_bytes),
            r_lb = ratio(m.activation_planned_bytes, m.activation_lower_bound_bytes),
            an = bytes(m.activation_no_reuse_bytes),
            r_nr = ratio(m.activation_no_reuse_bytes, m.activation_planned_bytes),
            al = bytes(m.activation_lower_bound_bytes),
            algo = m.plan_algorithm,
            buffers = m.planned_buffers,
            greedy = bytes(m.activation_greedy_bytes),
            dev_blocks = m.device_blocks_allocated,
            st_blocks = m.staging_blocks_allocated,
            st = bytes(m.staging_bytes_moved),
            host_memory = m.host_memory,
            mean = t.mean.as_secs_f64() * 1e3,
            runs = t.runs,
            median = t.median.as_secs_f64() * 1e3,
            min = t.min.as_secs_f64() * 1e3,
            peak_res = bytes(m.peak_device_bytes),
            peak_live = bytes(m.peak_device_live_bytes),
            r_pool = ratio(m.peak_device_bytes, m.peak_device_live_bytes),
            hwm = self.peak_host_bytes.map_or("-".to_string(), bytes),
            offload = self.offload_text(),
        ) + &self
            .phases
            .as_ref()
            .map_or_else(String::new, |p| format!("\n{}", p.to_text()))
    }

    /// The report fields as a JSON object (sizes in bytes, times in milliseconds).
    pub fn to_json(&self) -> Value {
        let m = &self.memory;
        let mut v = json!({
            "backend": self.backend,
            "device": self.device,
            "backend_selection": self.selection_json,
            "shape": self.shape,
            "weight_bytes": m.weight_bytes,
            "activation_planned_bytes": m.activation_planned_bytes,
            "activation_no_reuse_bytes": m.activation_no_reuse_bytes,
            "activation_lower_bound_bytes": m.activation_lower_bound_bytes,
            "activation_greedy_bytes": m.activation_greedy_bytes,
            "plan_algorithm": m.plan_algorithm,
            "planned_buffers": m.planned_buffers,
            "io_bytes": m.io_bytes,
            "device_blocks_allocated": m.device_blocks_allocated,
            "staging_blocks_allocated": m.staging_blocks_allocated,
            "staging_bytes_moved": m.staging_bytes_moved,
            "runs": self.timing.runs,
            "time_per_inference_ms": self.timing.mean.as_secs_f64() * 1e3,
            "time_median_ms": self.timing.median.as_secs_f64() * 1e3,
            "time_min_ms": self.timing.min.as_secs_f64() * 1e3,
            "steady_state_new_blocks": self.timing.steady_state_new_blocks,
            "peak_device_bytes": m.peak_device_bytes,
            "offload": m.offload.as_ref().map(|o| {
                let runs = m.runs.max(1);
                json!({
                    "device_budget": o.budget,
                    "planned_peak_bytes": o.planned_peak,
                    "score": o.score,
                    "unified_memory": o.unified,
                    "bytes_to_device_per_run": o.bytes_to_device / runs,
                    "bytes_to_host_per_run": o.bytes_to_host / runs,
                    "stall_last_run_ms": o.last_stall.as_secs_f64() * 1e3,
                    "runtime_reserved_bytes": m.runtime_reserved_bytes,
                    "runtime_limit_bytes": m.runtime_limit,
                    "scores": o.outcomes.iter().map(|s| json!({
                        "score": s.score.name(),
                        "peak_bytes": s.peak,
                        "bytes_to_device": s.bytes_to_device,
                        "bytes_to_host": s.bytes_to_host,
                        "absences": s.absences,
                        "predicted_stall_ms": s.predicted_stall.as_secs_f64() * 1e3,
                    })).collect::<Vec<_>>(),
                })
            }),
        });
        // Added outside `json!`: one macro call with every field passes its recursion limit.
        if let (Some(o), Some(off)) = (&m.offload, v["offload"].as_object_mut()) {
            let runs = m.runs.max(1);
            off.insert(
                "bytes_recomputed_per_run".into(),
                json!(o.bytes_recomputed / runs),
            );
            off.insert(
                "recompute_work_bytes_per_run".into(),
                json!(o.recompute_work / runs),
            );
            if let Some(scores) = off.get_mut("scores").and_then(Value::as_array_mut) {
                for (j, s) in scores.iter_mut().zip(&o.outcomes) {
                    j["bytes_recomputed"] = json!(s.bytes_recomputed);
                    j["recompute_work_bytes"] = json!(s.recompute_work);
                }
            }
        }
        v["weight_bytes_by_dtype"] = m
            .weight_bytes_by_dtype
            .iter()
            .map(|(d, b)| (d.name().to_string(), json!(b)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        v["weight_store_bytes"] = json!(m.weight_store.bytes);
        v["weight_store_tensors"] = json!(m.weight_store.tensors);
        v["weight_store_references"] = json!(m.weight_store.references);
        v["peak_host_rss_bytes"] = json!(self.peak_host_bytes);
        // Where the staging and host-visible pools' memory lives: "bound" (to `numa_node`),
        // "driver" (the driver places it) or "none" (no NUMA), with the reason in words.
        v["host_placement"] = json!({
            "policy": m.host_memory.policy(),
            "numa_node": m.host_memory.bound_node(),
            "detail": m.host_memory.to_string(),
        });
        v["peak_device_live_bytes"] = json!(m.peak_device_live_bytes);
        // Peak reserved over peak live: what the device pool's policy cost (issue 14's target is
        // at most 1.05); null before anything was allocated.
        v["peak_device_reserved_over_live"] = json!(
            (m.peak_device_live_bytes > 0)
                .then(|| m.peak_device_bytes as f64 / m.peak_device_live_bytes as f64)
        );
        if let Some(p) = &self.phases {
            v["host_memory_phases"] = p.to_json();
        }
        v
    }
}

/// `n` bytes with a binary unit ("1.61 MiB (1687040 B)").
pub fn bytes(n: u64) -> String {
    let (v, unit) = if n >= 1 << 30 {
        (n as f64 / f64::from(1u32 << 30), "GiB")
    } else if n >= 1 << 20 {
        (n as f64 / f64::from(1u32 << 20), "MiB")
    } else if n >= 1 << 10 {
        (n as f64 / f64::from(1u32 << 10), "KiB")
    } else {
        return format!("{n} B");
    };
    format!("{v:.2} {unit} ({n} B)")
}

#[cfg(test)]
mod tests;
