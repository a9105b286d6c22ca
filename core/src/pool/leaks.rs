//! The leak-report adaptor: at drop, and on demand ([`LeakReport::check`]), lists the allocations
//! of the pool below that are still live, largest first, with where each was made when a tracer
//! records backtraces (gpu-allocator's report on drop, RMM's tracking adaptor).
//!
//! The pool below already knows its live set (it needs it to free), so tracking costs nothing per
//! allocation; this adaptor only renders and reports it. On by default in a runtime.

use std::sync::{Arc, PoisonError, RwLock};

use crate::pool::device_pool::{self, DevicePool, LiveAllocation};
use crate::pool::tracing::TraceIds;
use crate::{Error, Result};

/// Reports the live allocations of the pool below. See the module doc.
pub struct LeakReport<P: DevicePool> {
    inner: P,
    /// Where backtraces come from while a tracing adaptor is on the stack.
    traced: RwLock<Option<Arc<TraceIds>>>,
}

impl<P: DevicePool> LeakReport<P> {
    /// Reports the leaks of `inner`.
    pub fn new(inner: P) -> Self {
        LeakReport {
            inner,
            traced: RwLock::new(None),
        }
    }

    /// Uses (`Some`) or stops using (`None`) a tracing adaptor's ids for backtraces.
    pub fn set_trace_ids(&self, ids: Option<Arc<TraceIds>>) {
        *self.traced.write().unwrap_or_else(PoisonError::into_inner) = ids;
    }

    /// Fails with [`Error::Leak`] when allocations are still live (strict mode for tests).
    ///
    /// # Errors
    /// [`Error::Leak`] listing each live allocation.
    pub fn check(&self) -> Result<()> {
        let traced = self.traced.read().unwrap_or_else(PoisonError::into_inner);
        check(&self.inner, traced.as_deref())
    }
}

/// Fails with [`Error::Leak`] when `pool` has live allocations; backtraces from `traced`.
///
/// # Errors
/// [`Error::Leak`] listing each live allocation.
pub(crate) fn check(pool: &dyn DevicePool, traced: Option<&TraceIds>) -> Result<()> {
    let live = pool.live_allocations();
    if live.is_empty() {
        return Ok(());
    }
    Err(Error::Leak {
        count: live.len(),
        bytes: live.iter().map(|l| l.size).sum(),
        report: render(&live, usize::MAX, traced),
    })
}

/// One line per live allocation (at most `max`), each followed by its backtrace when known.
fn render(live: &[LiveAllocation], max: usize, traced: Option<&TraceIds>) -> String {
    let mut out = Vec::new();
    for l in live.iter().take(max) {
        let label = if l.label.is_empty() {
            "<unlabelled>"
        } else {
            &l.label
        };
        out.push(format!("  {} bytes: {label}", l.size));
        if let Some(bt) = traced.and_then(|t| t.backtrace_of(l.handle)) {
            out.push(format!("    allocated at:\n{bt}"));
        }
    }
    out.join("\n")
}

impl<P: DevicePool> Drop for LeakReport<P> {
    fn drop(&mut self) {
        let live = self.inner.live_allocations();
        if !live.is_empty() {
            let bytes: u64 = live.iter().map(|l| l.size).sum();
            let traced = self.traced.read().unwrap_or_else(PoisonError::into_inner);
            eprintln!(
                "tensormem: {} pool dropped with {} live allocation(s), {bytes} bytes (leak report):\n{}",
                self.inner.name(),
                live.len(),
                render(&live, 20, traced.as_deref())
            );
        }
    }
}

/// Reporting changes nothing about allocating and freeing.
impl<P: DevicePool> device_pool::PoolAdaptor for LeakReport<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        &self.inner
    }

    fn expandable(&self) -> Option<&dyn crate::pool::Expandable> {
        self.inner.expandable()
    }
}
