//! [`OomReport`]: the numbers an out-of-memory error carries and the message that explains them
//! (what was asked, what the pool holds, what would help). Separate from the
//! [`Error`](super::Error) enum because its rendering is logic of its own, filled by every pool
//! that can run out.

use std::fmt;

/// Everything an out-of-memory error knows, so the message explains itself.
#[derive(Debug, Clone, Default)]
pub struct OomReport {
    /// Pool that failed ("device", "staging", "host-visible", ...).
    pub pool: String,
    /// Label of the failed request, if it had one.
    pub label: Option<String>,
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes reserved from the backend in blocks.
    pub reserved: u64,
    /// Bytes handed out to live allocations.
    pub in_use: u64,
    /// Largest free range in any block, in bytes.
    pub largest_free: u64,
    /// 1 - largest free / total free, over all blocks (0 when nothing is free).
    pub fragmentation: f64,
    /// Hard limit on reserved bytes, if any.
    pub budget: Option<u64>,
    /// Bytes whose free still waits for in-flight work.
    pub pending_free: u64,
    /// Largest live allocations, (label, size in bytes), largest first.
    pub largest_live: Vec<(String, u64)>,
    /// Whether returning empty blocks (trim) would have made room under the budget.
    pub trim_would_help: bool,
    /// Whether a static plan of the live set plus the request fits in the reserved or budgeted
    /// bytes: if so, the failure is fragmentation, and planning the workload avoids it.
    pub static_plan_would_fit: Option<bool>,
}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        write!(
            f,
            "out of memory in the {} pool: tried to allocate {} bytes ({:.2} MiB){}; \
             reserved {:.2} MiB, in use {:.2} MiB, largest free range {:.2} MiB, \
             fragmentation {:.1}%, pending frees {:.2} MiB, budget {}",
            self.pool,
            self.requested,
            mib(self.requested),
            self.label
                .as_ref()
                .map(|l| format!(" for '{l}'"))
                .unwrap_or_default(),
            mib(self.reserved),
            mib(self.in_use),
            mib(self.largest_free),
            self.fragmentation * 100.0,
            mib(self.pending_free),
            self.budget
                .map(|b| format!("{:.2} MiB", mib(b)))
                .unwrap_or_else(|| "none".into()),
        )?;
        if !self.largest_live.is_empty() {
            write!(f, "; largest live:")?;
            for (label, size) in &self.largest_live {
                write!(f, " {label} ({:.2} MiB)", mib(*size))?;
            }
        }
        if let Some(fit) = self.static_plan_would_fit {
            write!(
                f,
                "; a static plan of the live set {} fit",
                if fit { "would" } else { "would not" }
            )?;
        }
        write!(f, ". What you can do: ")?;
        if self.pending_free > 0 {
            write!(f, "wait for in-flight work so pending frees complete; ")?;
        }
        if self.trim_would_help {
            write!(f, "trim the pool to return empty blocks; ")?;
        }
        if self.fragmentation > 0.5 {
            write!(
                f,
                "memory is fragmented: plan the workload statically or use fewer, larger blocks; "
            )?;
        }
        write!(
            f,
            "free tensors you no longer need, lower the batch size, or raise the budget."
        )
    }
}
