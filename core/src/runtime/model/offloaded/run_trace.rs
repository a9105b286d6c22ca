//! The trace of a budgeted model: its pools' allocations, each residency of the offload schedule
//! as a virtual allocation inside the arena, every op's uses, and every copy between device and
//! host memory ([`EventKind::Transfer`]). Built only when the runtime has a tracer at compile
//! time, so an untraced run pays one branch per op.
//!
//! A residency `[lower, upper)` is allocated (pool `"<device pool>/planned"`, child of the arena)
//! before op `lower`, after its arrival's copy when it has one (a prefetch reads the weight's
//! master, a swap-in the tensor's slot), and freed after op `upper - 1`, after its copy-out (a
//! swap-out writes the slot). Bindings in host memory (unified memory) use the host allocation.
//! Host writes and reads between runs are uploads and downloads of the arena (or of the host
//! allocation): the fixed residencies exist only during runs.

use std::sync::Arc;

use crate::pool::{ArenaPool, DevicePool, TraceIds, Traced};
use crate::trace::{Access, EventKind, Tracer, TransferKind};

/// A model pool, traced when the model is.
pub(super) fn pool(
    pool: ArenaPool,
    tracer: Option<&Tracer>,
) -> (Arc<dyn DevicePool>, Option<Arc<TraceIds>>) {
    match tracer {
        Some(t) => {
            let traced = Traced::new(pool, t.clone());
            let ids = traced.ids().clone();
            (Arc::new(traced), Some(ids))
        }
        None => (Arc::new(pool), None),
    }
}

/// One residency of the schedule: tensor, first op, one past the last op, arena offset.
pub(super) type Residency = (usize, u64, u64, u64);

/// What a budgeted model records per run. See the module doc.
pub(super) struct OffloadTrace {
    tracer: Tracer,
    /// Pool name of the residencies.
    pool: String,
    /// Trace id of the arena (0 when the model has none).
    arena: u64,
    /// Per root tensor: trace id of its host allocation (`Upload` pool), 0 when none.
    host: Vec<u64>,
    /// Per root tensor: trace id of its copy-out slot (`Readback` pool), 0 when none.
    slot: Vec<u64>,
    /// Per op: residencies starting before it, as `(tensor, arena offset)`.
    start: Vec<Vec<(usize, u64)>>,
    /// Per op: tensors whose residency ends after it.
    end: Vec<Vec<usize>>,
    /// Per root tensor: trace id of its residency in this run (0 when none).
    current: Vec<u64>,
}

impl OffloadTrace {
    /// The trace of a model with `ops` ops over the given residencies; `ids` are the ids of the
    /// arena and of each tensor's host allocation and slot.
    pub(super) fn new(
        tracer: Tracer,
        device_pool: &str,
        ops: usize,
        residencies: &[Residency],
        (arena, host, slot): (u64, Vec<u64>, Vec<u64>),
    ) -> Self {
        let mut start = vec![Vec::new(); ops];
        let mut end = vec![Vec::new(); ops];
        for &(t, lower, upper, offset) in residencies {
            if lower < upper && (upper as usize) <= ops {
                start[lower as usize].push((t, offset));
                end[upper as usize - 1].push(t);
            }
        }
        let current = vec![0; host.len()];
        OffloadTrace {
            tracer,
            pool: format!("{device_pool}/planned"),
            arena,
            host,
            slot,
            start,
            end,
            current,
        }
    }

    /// Before op `k`'s arrivals: its residencies that start are allocated.
    pub(super) fn open(&mut self, k: usize, sizes: &[u64], label: impl Fn(usize) -> String) {
        for &(t, offset) in &self.start[k] {
            let id = self.tracer.next_id();
            self.current[t] = id;
            self.tracer.record(EventKind::Alloc {
                id,
                pool: self.pool.clone(),
                size: sizes[t],
                offset,
                label: label(t),
                parent: Some(self.arena),
            });
        }
    }

    /// Tensor `t`'s arrival: from its master (a prefetch), its slot (a swap-in), or the host (an
    /// upload of the rows a lookup selected).
    pub(super) fn arrive(&self, t: usize, size: u64, kind: Option<TransferKind>) {
        let to = self.current[t];
        self.tracer.record(match kind {
            Some(kind) => EventKind::Transfer {
                from: if kind == TransferKind::Prefetch {
                    self.host[t]
                } else {
                    self.slot[t]
                },
                to,
                size,
                kind,
            },
            None => EventKind::Upload { id: to, size },
        });
    }

    /// Op `k`'s binding of tensor `t` (`size` bytes of it), in the arena or in host memory.
    pub(super) fn bind(&self, op: &str, t: usize, in_arena: bool, size: u64, access: Access) {
        let id = if in_arena {
            self.current[t]
        } else {
            self.host[t]
        };
        self.tracer.record(EventKind::Use {
            id,
            op: op.to_string(),
            access,
            size,
        });
    }

    /// Tensor `t`'s copy-out to its slot after an op.
    pub(super) fn copy_out(&self, t: usize, size: u64) {
        self.tracer.record(EventKind::Transfer {
            from: self.current[t],
            to: self.slot[t],
            size,
            kind: TransferKind::SwapOut,
        });
    }

    /// After op `k` and its copy-outs: its residencies that end are freed.
    pub(super) fn close(&mut self, k: usize) {
        for &t in &self.end[k] {
            let id = std::mem::take(&mut self.current[t]);
            if id != 0 {
                self.tracer.record(EventKind::FreeRequested { id });
            }
        }
    }

    /// A host write (`write`) or read of tensor `t` between runs, `size` bytes: of its host
    /// allocation where it has one, else of the arena.
    pub(super) fn host_io(&self, t: usize, size: u64, write: bool) {
        let id = match self.host[t] {
            0 => self.arena,
            id => id,
        };
        self.tracer.record(if write {
            EventKind::Upload { id, size }
        } else {
            EventKind::Download { id, size }
        });
    }
}
