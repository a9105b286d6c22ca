//! Building a pool stack from configuration: a bottom pool (an [`ArenaPool`], or any
//! [`DevicePool`] such as a [`ReplayPool`](crate::pool::ReplayPool) or a user's own) wrapped in the
//! adaptors the configuration asks for, and nothing else.
//!
//! Order, innermost first: guard margins, zero-on-reuse (which then clears only the data, not the
//! margins), statistics (which then count the callers' bytes, margins excluded), the leak report. A runtime puts the tracing adaptor on top while tracing is on. Any
//! other order is a valid stack too; this is the one the runtime builds.

use std::sync::Arc;

use crate::Result;
use crate::backend::{Backend, MemoryKind};
use crate::pool::arena::{ArenaConfig, ArenaPool, DEFAULT_BLOCK_SIZE};
use crate::pool::budget::Budget;
use crate::pool::device_pool::DevicePool;
use crate::pool::guard::Guarded;
use crate::pool::leaks::LeakReport;
use crate::pool::stats::StatsPool;
use crate::pool::zeroing::ZeroOnReuse;

/// Configuration of a pool stack: the arena, and which adaptors wrap it.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Name used in reports and errors ("device", "host-visible", ...).
    pub name: String,
    /// Memory kind of the pool's blocks.
    pub kind: MemoryKind,
    /// Arena block size in bytes ([`ArenaConfig::block_size`]).
    pub block_size: u64,
    /// Hard limit on reserved bytes ([`ArenaConfig::budget`]); in a runtime, the limit of the
    /// budget shared by its pools.
    pub budget: Option<u64>,
    /// Clear memory before handing it out ([`ZeroOnReuse`]). Costs one fill per allocation.
    /// Default `false`.
    pub zero_on_reuse: bool,
    /// Debug guard margins of this many bytes before and after every allocation ([`Guarded`]),
    /// checked on free, which then fails with [`Error::Corruption`](crate::Error::Corruption) naming
    /// the label. Default 0 (off); 64 is typical in tests. Costs a wait per checked free, and on
    /// devices whose memory the host cannot map, a block allocation and a copy per margin.
    pub guard_bytes: u64,
    /// Print the live allocations when the stack is dropped, and allow a strict check
    /// ([`LeakReport`]). Default `true` (free per allocation; renders only at drop).
    pub leak_report: bool,
    /// Count the callers' allocations ([`StatsPool`]): bytes requested and handed out, peaks,
    /// refusals; what [`Model::memory_report`](crate::Model::memory_report) shows of the device
    /// pool. Default `false`: one uncontended lock per allocation and per free, measured at
    /// about a quarter of an allocate+free pair's cost (`cargo bench -p tensormem --bench pool`).
    pub statistics: bool,
}

impl PoolConfig {
    /// The default device pool: an arena of 32 MiB blocks with a leak report.
    pub fn device() -> Self {
        let a = ArenaConfig::device();
        PoolConfig {
            name: a.name,
            kind: a.kind,
            block_size: DEFAULT_BLOCK_SIZE,
            budget: None,
            zero_on_reuse: false,
            guard_bytes: 0,
            leak_report: true,
            statistics: false,
        }
    }

    /// The default host-visible pool of `kind` (`Upload` or `Readback`).
    pub fn host_visible(kind: MemoryKind) -> Self {
        let a = ArenaConfig::host_visible(kind);
        PoolConfig {
            name: a.name,
            kind,
            block_size: a.block_size,
            ..PoolConfig::device()
        }
    }

    /// The arena part of the configuration.
    pub fn arena(&self) -> ArenaConfig {
        ArenaConfig {
            name: self.name.clone(),
            kind: self.kind,
            block_size: self.block_size,
            budget: self.budget,
            ..ArenaConfig::device()
        }
    }

    /// Builds an arena pool with a budget of its own and wraps it.
    ///
    /// # Errors
    /// Invalid arena or adaptor configuration.
    pub fn build(&self, backend: Arc<dyn Backend>) -> Result<PoolStack> {
        let arena = ArenaPool::new(backend.clone(), self.arena())?;
        self.wrap(backend, Arc::new(arena))
    }

    /// Builds an arena pool that reserves against `budget` (shared with other pools) and wraps it.
    ///
    /// # Errors
    /// As [`PoolConfig::build`].
    pub fn build_with_budget(
        &self,
        backend: Arc<dyn Backend>,
        budget: Arc<Budget>,
    ) -> Result<PoolStack> {
        let bottom = ArenaPool::with_budget(backend.clone(), self.arena(), budget)?;
        self.wrap(backend, Arc::new(bottom))
    }

    /// Wraps `bottom` (any pool of this configuration's memory kind) in the configured adaptors.
    ///
    /// # Errors
    /// Invalid adaptor configuration.
    pub fn wrap(
        &self,
        backend: Arc<dyn Backend>,
        bottom: Arc<dyn DevicePool>,
    ) -> Result<PoolStack> {
        let mut top = bottom;
        if self.guard_bytes > 0 {
            top = Arc::new(Guarded::new(
                top,
                backend.clone(),
                self.kind,
                self.guard_bytes,
            )?);
        }
        if self.zero_on_reuse {
            top = Arc::new(ZeroOnReuse::new(top, backend, self.kind));
        }
        let stats = self
            .statistics
            .then(|| Arc::new(StatsPool::new(top.clone())));
        if let Some(s) = &stats {
            top = s.clone();
        }
        let leaks = self
            .leak_report
            .then(|| Arc::new(LeakReport::new(top.clone())));
        if let Some(l) = &leaks {
            top = l.clone();
        }
        Ok(PoolStack { top, leaks, stats })
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig::device()
    }
}

/// A built pool stack: its top, and the adaptors with an interface of their own when configured.
#[derive(Clone)]
pub struct PoolStack {
    /// The outermost pool: allocate and free here.
    pub top: Arc<dyn DevicePool>,
    /// The leak-report adaptor, for strict checks and backtraces.
    pub leaks: Option<Arc<LeakReport<Arc<dyn DevicePool>>>>,
    /// The statistics adaptor, for its counters.
    pub stats: Option<Arc<StatsPool<Arc<dyn DevicePool>>>>,
}

#[cfg(test)]
mod tests;
