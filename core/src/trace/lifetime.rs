//! Allocation lifetimes read from a trace: the unit the exports and the analysis work on.
//!
//! One pass over the events: an `Alloc` opens a lifetime, `FreeRequested` closes it, every event
//! that reads or writes an allocation ([`EventKind::uses`]) is appended to its uses, and a spill
//! ([`TransferKind::Spill`]) opens a range of steps in which its bytes are off the device, closed
//! by the matching restore (or the free). O(events).

use std::collections::HashMap;

use super::{Access, EventKind, Trace, TransferKind};

/// One allocation's life as read from a trace: the unit the exports and the analysis work on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Trace id.
    pub id: u64,
    /// Pool name.
    pub pool: String,
    /// Label.
    pub label: String,
    /// Bytes held.
    pub size: u64,
    /// Offset in its block or arena, in bytes.
    pub offset: u64,
    /// The containing allocation, for virtual ones.
    pub parent: Option<u64>,
    /// Index of the `Alloc` event.
    pub alloc_step: usize,
    /// Index of the `FreeRequested` event; `None` if never freed (a leak).
    pub free_step: Option<usize>,
    /// Time of the `Alloc` event, ns.
    pub alloc_ns: u64,
    /// Time of the `FreeRequested` event, ns.
    pub free_ns: Option<u64>,
    /// Uses in order: (event index, access, bytes covered).
    pub uses: Vec<(usize, Access, u64)>,
    /// Event index ranges `[spill, restore)` in which its bytes were off the device (spilled to
    /// host memory); a range still open at the free ends there, at the trace's end if never freed.
    pub away: Vec<(usize, usize)>,
    /// Backtrace of the allocation, when recorded.
    pub backtrace: Option<String>,
}

impl Trace {
    /// The lifetimes of every allocation in the trace, in allocation order. Events naming an id
    /// with no `Alloc` before them are ignored (a trace may start after some allocations).
    pub fn lifetimes(&self) -> Vec<Lifetime> {
        let mut out: Vec<Lifetime> = Vec::new();
        let mut index: HashMap<u64, usize> = HashMap::new();
        // Per allocation: the step of its open spill.
        let mut spilled: HashMap<u64, usize> = HashMap::new();
        for (step, ev) in self.events.iter().enumerate() {
            match &ev.kind {
                EventKind::Alloc {
                    id,
                    pool,
                    size,
                    offset,
                    label,
                    parent,
                } => {
                    index.insert(*id, out.len());
                    out.push(Lifetime {
                        id: *id,
                        pool: pool.clone(),
                        label: label.clone(),
                        size: *size,
                        offset: *offset,
                        parent: *parent,
                        alloc_step: step,
                        free_step: None,
                        alloc_ns: ev.time_ns,
                        free_ns: None,
                        uses: Vec::new(),
                        away: Vec::new(),
                        backtrace: ev.backtrace.clone(),
                    });
                }
                EventKind::FreeRequested { id } => {
                    if let Some(l) = index.remove(id).and_then(|i| out.get_mut(i)) {
                        l.free_step = Some(step);
                        l.free_ns = Some(ev.time_ns);
                        if let Some(from) = spilled.remove(id) {
                            l.away.push((from, step));
                        }
                    }
                }
                EventKind::Transfer {
                    from,
                    to,
                    kind: TransferKind::Spill | TransferKind::Restore,
                    ..
                } => {
                    // A spill reads `from` out to the host, a restore writes `to` back.
                    if *to == 0 && index.contains_key(from) {
                        spilled.entry(*from).or_insert(step);
                    } else if let Some(at) = spilled.remove(to)
                        && let Some(l) = index.get(to).and_then(|&i| out.get_mut(i))
                    {
                        l.away.push((at, step));
                    }
                }
                kind => {
                    for (id, access, size) in kind.uses() {
                        if let Some(l) = index.get(&id).and_then(|&i| out.get_mut(i)) {
                            l.uses.push((step, access, size));
                        }
                    }
                }
            }
        }
        let end = self.events.len();
        for (id, from) in spilled {
            if let Some(l) = index.get(&id).and_then(|&i| out.get_mut(i)) {
                l.away.push((from, end));
            }
        }
        for l in &mut out {
            l.away.sort_unstable();
        }
        out
    }

    /// Pool names in order of first appearance.
    pub fn pools(&self) -> Vec<String> {
        let mut pools: Vec<String> = Vec::new();
        for ev in &self.events {
            let p = match &ev.kind {
                EventKind::Alloc { pool, .. }
                | EventKind::BlockReserve { pool, .. }
                | EventKind::BlockRelease { pool, .. } => pool,
                _ => continue,
            };
            if !pools.contains(p) {
                pools.push(p.clone());
            }
        }
        pools
    }
}
