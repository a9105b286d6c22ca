//! The process's host memory per phase of a sample's run: what loading costs, where.
//!
//! One number (the process's peak resident set, `VmHWM`) says how much host memory a run took
//! but not which step took it. [`PhaseMeter`] cuts the run into named phases (open the weight
//! file, read config and tokenizer, compile and upload, first run, ...) and records for each the
//! peak resident set *during* it and the resident set at its end, split into anonymous memory
//! (heap: the host backend's blocks, activations, the allocator's retained pages) and file pages
//! (the mapped weight file). Linux resets the high-water mark when `5` is written to
//! `/proc/self/clear_refs`, so each phase's peak is its own; the run's peak is the largest.
//!
//! Elsewhere (no `/proc`), every figure is `None` and the report prints `-`.

use serde_json::{Value, json};

/// Resident memory figures of the process now, from `/proc/self/status`. Bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostMemory {
    /// Resident set now (`VmRSS`).
    pub rss: u64,
    /// Peak resident set since the last reset (`VmHWM`).
    pub hwm: u64,
    /// Resident anonymous memory (`RssAnon`): heap and anonymous maps.
    pub anon: u64,
    /// Resident file-backed pages (`RssFile`): mapped files, the weight file included.
    pub file: u64,
}

impl HostMemory {
    /// The figures now, or `None` where `/proc/self/status` is missing or lacks one of them.
    pub fn now() -> Option<Self> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        Self::parse(&status)
    }

    /// Parses the text of `/proc/self/status` (sizes in kB).
    fn parse(status: &str) -> Option<Self> {
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
            Some(kib * 1024)
        };
        Some(HostMemory {
            rss: field("VmRSS:")?,
            hwm: field("VmHWM:")?,
            anon: field("RssAnon:")?,
            file: field("RssFile:")?,
        })
    }
}

/// Resets the process's resident-set high-water mark to the current resident set; false where
/// the kernel does not offer it (then phase peaks are peaks since the process started).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// One finished phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    /// What ran ("open weight file", ...).
    pub name: String,
    /// Peak resident set during the phase (since the process started when resets are
    /// unavailable: see [`PhaseMeter::resets`]).
    pub peak: Option<u64>,
    /// The figures at the phase's end.
    pub end: Option<HostMemory>,
}

/// Records [`Phase`]s in order (module doc).
#[derive(Clone, Debug)]
pub struct PhaseMeter {
    phases: Vec<Phase>,
    /// The figures when the meter started.
    start: Option<HostMemory>,
    /// Whether the high-water mark could be reset (each phase's peak is then its own).
    resets: bool,
}

impl PhaseMeter {
    /// Starts measuring: the first phase begins now.
    pub fn start() -> Self {
        let resets = reset_peak();
        PhaseMeter {
            phases: Vec::new(),
            start: HostMemory::now(),
            resets,
        }
    }

    /// Ends the current phase under `name`; the next begins.
    pub fn phase(&mut self, name: &str) {
        let end = HostMemory::now();
        self.phases.push(Phase {
            name: name.to_string(),
            peak: end.map(|m| m.hwm),
            end,
        });
        self.resets = self.resets && reset_peak();
    }

    /// The phases so far.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Whether every phase's peak is its own (the kernel reset the high-water mark each time).
    pub fn resets(&self) -> bool {
        self.resets
    }

    /// The largest peak of any phase, or `None` when unknown.
    pub fn peak(&self) -> Option<u64> {
        self.phases.iter().filter_map(|p| p.peak).max()
    }

    /// One line per phase: peak, and resident set (anonymous + file) at its end.
    pub fn to_text(&self) -> String {
        let fmt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), mib);
        let mut out = format!(
            "host memory by phase (MiB; peak during the phase{}, then resident at its end)\n",
            if self.resets {
                ""
            } else {
                " since start: no reset"
            }
        );
        if let Some(s) = self.start {
            out += &format!(
                "  {:<28} resident {} (anon {}, file {})\n",
                "start",
                mib(s.rss),
                mib(s.anon),
                mib(s.file)
            );
        }
        for p in &self.phases {
            out += &format!(
                "  {:<28} peak {:>8}  resident {} (anon {}, file {})\n",
                p.name,
                fmt(p.peak),
                fmt(p.end.map(|m| m.rss)),
                fmt(p.end.map(|m| m.anon)),
                fmt(p.end.map(|m| m.file)),
            );
        }
        out.trim_end().to_string()
    }

    /// The phases as JSON (bytes).
    pub fn to_json(&self) -> Value {
        let figures = |m: Option<HostMemory>| {
            json!({
                "rss_bytes": m.map(|m| m.rss),
                "anon_bytes": m.map(|m| m.anon),
                "file_bytes": m.map(|m| m.file),
            })
        };
        json!({
            "peak_resets": self.resets,
            "start": figures(self.start),
            "phases": self.phases.iter().map(|p| json!({
                "phase": p.name,
                "peak_bytes": p.peak,
                "end": figures(p.end),
            })).collect::<Vec<_>>(),
        })
    }
}

/// `n` bytes in MiB with two decimals (the phase table's unit).
fn mib(n: u64) -> String {
    format!("{:.2}", n as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests;
