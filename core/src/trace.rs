//! Memory tracing: a timeline of every allocation, free, block, transfer and tensor use.
//!
//! A [`Tracer`] is a cheap shared handle (`Clone` shares it) that records [`TraceEvent`]s with a
//! timestamp in nanoseconds since the tracer was created. Pools and runtimes hold an
//! `Option<Tracer>`; with none set (the default) recording costs one branch per operation.
//!
//! What records what:
//! - [`ArenaPool`](crate::ArenaPool) (wrapped in [`Traced`](crate::pool::Traced)):
//!   [`EventKind::Alloc`], [`EventKind::FreeRequested`], [`EventKind::FreeReclaimed`] (the bytes
//!   return to the sub-allocator, possibly later, after in-flight work), [`EventKind::BlockReserve`],
//!   [`EventKind::BlockRelease`];
//! - [`Runtime`](crate::Runtime): [`EventKind::Upload`] and [`EventKind::Download`];
//! - [`Model::enqueue`](crate::Model::enqueue): one [`EventKind::Use`] per op binding (inputs read,
//!   output written), and for tensors planned inside the activation arena a *virtual* allocation
//!   (pool `"<pool>/planned"`, at the tensor's planned offset) from its first write to its last use,
//!   so the timeline shows each intermediate's lifetime.
//!
//! A recorded [`Trace`] exports to Chrome trace / Perfetto JSON ([`Trace::to_chrome_json`], which
//! also embeds the raw events so [`Trace::from_json`] reads the file back), to a self-contained HTML
//! timeline ([`Trace::to_html`]), and is checked for wasted memory by [`analyze`].
//!
//! Design choices:
//! - One mutex-guarded `Vec` per tracer: events from several threads interleave in the order they
//!   took the lock, which is the order the analysis uses (time stamps are taken under the lock, so
//!   they never go backwards).
//! - Ids are issued by the tracer ([`Tracer::next_id`]), not taken from pool handles, so ids from
//!   several pools and from virtual allocations never collide in one trace.
//! - Backtraces ([`Tracer::with_backtraces`]) are captured with
//!   [`std::backtrace::Backtrace::force_capture`] on allocations only; they cost microseconds each.
//!
//! Limits: the whole trace lives in memory (about 100 bytes per event plus labels).
#![forbid(unsafe_code)]

use crate::time::Instant;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

mod analyze;
mod chrome;
mod html;
mod json;
mod kv;
mod lifetime;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod transfer_tests;

pub use analyze::{AnalyzeOptions, Finding, FindingKind, analyze};
pub use kv::KvSummary;
pub use lifetime::Lifetime;

/// Whether an op reads or writes a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The op reads the tensor (an input binding, or a download).
    Read,
    /// The op writes the tensor (the output binding, or an upload).
    Write,
}

impl Access {
    /// `"read"` or `"write"`.
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// An allocation was handed out.
    Alloc {
        /// Trace id of the allocation (unique within the tracer).
        id: u64,
        /// Pool name (`"device"`, `"device/planned"` for virtual tensors in an activation arena).
        pool: String,
        /// Bytes held (after rounding to the copy alignment).
        size: u64,
        /// Offset in bytes in its block (virtual tensors: in the arena).
        offset: u64,
        /// The allocation's label.
        label: String,
        /// For a virtual allocation, the trace id of the allocation that contains it (the arena).
        parent: Option<u64>,
    },
    /// The owner freed the allocation; its bytes stop counting as in use.
    FreeRequested {
        /// Trace id.
        id: u64,
    },
    /// The bytes went back to the sub-allocator (after the work that used them completed).
    FreeReclaimed {
        /// Trace id.
        id: u64,
    },
    /// A block was reserved from the backend.
    BlockReserve {
        /// Pool name.
        pool: String,
        /// Backend block id.
        block: u64,
        /// Bytes.
        size: u64,
    },
    /// A block was returned to the backend.
    BlockRelease {
        /// Pool name.
        pool: String,
        /// Backend block id.
        block: u64,
        /// Bytes.
        size: u64,
    },
    /// Bytes written from the host into an allocation.
    Upload {
        /// Trace id of the allocation written.
        id: u64,
        /// Bytes.
        size: u64,
    },
    /// Bytes read back from an allocation to the host.
    Download {
        /// Trace id of the allocation read.
        id: u64,
        /// Bytes.
        size: u64,
    },
    /// An op used an allocation.
    Use {
        /// Trace id.
        id: u64,
        /// The op's label.
        op: String,
        /// Read or write.
        access: Access,
        /// Bytes of the allocation the op's binding covers.
        size: u64,
    },
    /// Bytes copied between device and host memory by an offloading pool or model: a budgeted
    /// model's prefetches and swaps, a spill pool's spills and restores.
    Transfer {
        /// Trace id of the allocation read (0: host memory no traced allocation holds, such as a
        /// spilled allocation's host copy).
        from: u64,
        /// Trace id of the allocation written (0: such host memory).
        to: u64,
        /// Bytes.
        size: u64,
        /// Why the bytes moved.
        kind: TransferKind,
    },
    /// A paged KV cache's state after a change of its blocks ([`KvCache`](crate::kv::KvCache)):
    /// the timeline's KV lane.
    Kv {
        /// Blocks held by sequences.
        used: u64,
        /// Idle blocks kept for their prefix.
        cached: u64,
        /// Free blocks of those the cache holds.
        free: u64,
        /// Tokens stored.
        tokens: u64,
        /// Prefix-cache hits so far.
        hits: u64,
        /// Blocks swapped out or in so far.
        swapped: u64,
    },
}

impl EventKind {
    /// The allocation the event is about, if any.
    pub fn id(&self) -> Option<u64> {
        match self {
            EventKind::Alloc { id, .. }
            | EventKind::FreeRequested { id }
            | EventKind::FreeReclaimed { id }
            | EventKind::Upload { id, .. }
            | EventKind::Download { id, .. }
            | EventKind::Use { id, .. } => Some(*id),
            EventKind::Transfer { from, to, .. } => Some(if *from != 0 { *from } else { *to }),
            EventKind::BlockReserve { .. }
            | EventKind::BlockRelease { .. }
            | EventKind::Kv { .. } => None,
        }
    }

    /// The uses of allocations the event is, as `(id, access, bytes)`: [`EventKind::Use`],
    /// [`EventKind::Upload`] (a write), [`EventKind::Download`] (a read), and a copy between two
    /// allocations ([`EventKind::Transfer`] other than a spill or restore: a read of `from` and a
    /// write of `to`). A spill or restore moves an allocation's bytes without using them: it is
    /// no use (the lifetime records it as time off the device).
    pub fn uses(&self) -> impl Iterator<Item = (u64, Access, u64)> {
        let (a, b) = match self {
            EventKind::Use {
                id, access, size, ..
            } => (Some((*id, *access, *size)), None),
            EventKind::Upload { id, size } => (Some((*id, Access::Write, *size)), None),
            EventKind::Download { id, size } => (Some((*id, Access::Read, *size)), None),
            EventKind::Transfer {
                from,
                to,
                size,
                kind,
            } if !kind.is_spill() => (
                (*from != 0).then_some((*from, Access::Read, *size)),
                (*to != 0).then_some((*to, Access::Write, *size)),
            ),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }
}

/// Why bytes moved between device and host memory ([`EventKind::Transfer`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferKind {
    /// A budgeted model copies a streamed weight from its host master into the device.
    Prefetch,
    /// A budgeted model copies an activation out to its host slot.
    SwapOut,
    /// A budgeted model brings an activation back from its host slot.
    SwapIn,
    /// A spill pool moves an idle allocation's bytes to host memory, freeing its device bytes.
    Spill,
    /// A spill pool brings a spilled allocation's bytes back into device memory.
    Restore,
}

impl TransferKind {
    /// Every kind, in declaration order.
    pub const ALL: [TransferKind; 5] = [
        TransferKind::Prefetch,
        TransferKind::SwapOut,
        TransferKind::SwapIn,
        TransferKind::Spill,
        TransferKind::Restore,
    ];

    /// `"prefetch"`, `"swap out"`, `"swap in"`, `"spill"` or `"restore"`.
    pub fn name(self) -> &'static str {
        match self {
            TransferKind::Prefetch => "prefetch",
            TransferKind::SwapOut => "swap out",
            TransferKind::SwapIn => "swap in",
            TransferKind::Spill => "spill",
            TransferKind::Restore => "restore",
        }
    }

    /// The kind named `name` ([`TransferKind::name`]).
    pub fn from_name(name: &str) -> Option<TransferKind> {
        TransferKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A spill or a restore: the same allocation leaves or re-enters device memory.
    pub fn is_spill(self) -> bool {
        matches!(self, TransferKind::Spill | TransferKind::Restore)
    }
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Nanoseconds since the tracer was created. Non-decreasing along a trace.
    pub time_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// Where it happened (allocations only, when backtraces are on).
    pub backtrace: Option<String>,
}

struct TracerInner {
    start: Instant,
    backtraces: bool,
    next_id: AtomicU64,
    events: Mutex<Vec<TraceEvent>>,
}

/// A shared recorder of [`TraceEvent`]s. `Clone` shares it; `Send + Sync`.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<TracerInner>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("backtraces", &self.inner.backtraces)
            .field("events", &self.len())
            .finish()
    }
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer::new()
    }
}

impl Tracer {
    /// A tracer without backtraces; time starts now.
    pub fn new() -> Self {
        Tracer::build(false)
    }

    /// A tracer that captures a backtrace with every allocation event.
    pub fn with_backtraces() -> Self {
        Tracer::build(true)
    }

    fn build(backtraces: bool) -> Self {
        Tracer {
            inner: Arc::new(TracerInner {
                start: Instant::now(),
                backtraces,
                next_id: AtomicU64::new(1),
                events: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Whether allocation events carry backtraces.
    pub fn backtraces(&self) -> bool {
        self.inner.backtraces
    }

    /// A fresh allocation id (never 0, unique within this tracer).
    pub fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `kind` now. Allocation events get a backtrace when backtraces are on.
    pub fn record(&self, kind: EventKind) {
        let backtrace = (self.inner.backtraces && matches!(kind, EventKind::Alloc { .. }))
            .then(|| std::backtrace::Backtrace::force_capture().to_string());
        let mut events = self
            .inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let time_ns = self.inner.start.elapsed().as_nanos() as u64;
        events.push(TraceEvent {
            time_ns,
            kind,
            backtrace,
        });
    }

    /// The backtrace recorded with allocation `id`, if backtraces are on and it is still in the
    /// tracer. O(events).
    pub fn backtrace_of(&self, id: u64) -> Option<String> {
        if !self.inner.backtraces || id == 0 {
            return None;
        }
        let events = self
            .inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        events.iter().rev().find_map(|e| match &e.kind {
            EventKind::Alloc { id: i, .. } if *i == id => e.backtrace.clone(),
            _ => None,
        })
    }

    /// Events recorded so far.
    pub fn len(&self) -> usize {
        self.inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the events recorded so far.
    pub fn snapshot(&self) -> Trace {
        Trace {
            events: self
                .inner
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// Takes the events recorded so far, leaving the tracer empty (ids keep counting).
    pub fn take(&self) -> Trace {
        Trace {
            events: std::mem::take(
                &mut *self
                    .inner
                    .events
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            ),
        }
    }
}

/// A recorded sequence of events, in recording order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The events, in the order they were recorded (times non-decreasing).
    pub events: Vec<TraceEvent>,
}
