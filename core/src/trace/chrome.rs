//! Chrome trace / Perfetto JSON export.
//!
//! Layout: one process per pool (named after it) with two counter tracks, `in use` and `reserved`
//! (bytes), and one complete slice (`ph: "X"`) per allocation lifetime, on as few threads (rows)
//! as keep slices from overlapping; op uses and copies are instant events on the allocation's row,
//! and a spilled allocation leaves its pool's `in use` count until it is restored. A paged KV
//! cache's events make one more process, `kv cache`, with `blocks` (used, cached, free) and
//! `tokens` counter tracks. The raw
//! events ride along under `tensormemEvents` (ignored by the viewers) so [`Trace::from_json`]
//! reads the file back losslessly.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::json::{RAW_KEY, push_events, write_str};
use super::{EventKind, Trace, TransferKind};

/// Nanoseconds as Chrome's microsecond timestamps.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

impl Trace {
    /// The trace as Chrome trace JSON (open in `chrome://tracing` or <https://ui.perfetto.dev>),
    /// with the raw events embedded for [`Trace::from_json`].
    pub fn to_chrome_json(&self) -> String {
        let pools = self.pools();
        let pid = |pool: &str| pools.iter().position(|p| p == pool).map_or(0, |i| i + 1);
        let mut lines: Vec<String> = Vec::new();
        for (i, p) in pools.iter().enumerate() {
            let mut l = format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
                i + 1
            );
            write_str(&mut l, &format!("pool {p}"));
            l.push_str("}}");
            lines.push(l);
        }
        // Counters, in u128: the sizes of live allocations can sum past u64::MAX, and a wrapped
        // (or, in debug builds, panicking) sum would hide the peak. JSON numbers have no range.
        let mut in_use: HashMap<&str, u128> = HashMap::new();
        let mut reserved: HashMap<&str, u128> = HashMap::new();
        let mut sizes: HashMap<u64, (&str, u64)> = HashMap::new();
        // Spilled allocations: their bytes are counted out of their pool until restored.
        let mut away: HashSet<u64> = HashSet::new();
        let mut kv_named = false;
        let counter = |lines: &mut Vec<String>, name: &str, pool: &str, t: u64, v: u128| {
            lines.push(format!(
                "{{\"ph\":\"C\",\"name\":\"{name}\",\"pid\":{},\"tid\":0,\"ts\":{},\"args\":{{\"bytes\":{v}}}}}",
                pid(pool),
                us(t)
            ));
        };
        for ev in &self.events {
            match &ev.kind {
                EventKind::Alloc { id, pool, size, .. } => {
                    sizes.insert(*id, (pool.as_str(), *size));
                    let v = in_use.entry(pool.as_str()).or_default();
                    *v += u128::from(*size);
                    let v = *v;
                    counter(&mut lines, "in use", pool, ev.time_ns, v);
                }
                EventKind::FreeRequested { id } => {
                    if let Some((pool, size)) = sizes.remove(id).filter(|_| !away.remove(id)) {
                        let v = in_use.entry(pool).or_default();
                        *v = v.saturating_sub(u128::from(size));
                        let v = *v;
                        counter(&mut lines, "in use", pool, ev.time_ns, v);
                    }
                }
                EventKind::Transfer {
                    from,
                    to,
                    kind: kind @ (TransferKind::Spill | TransferKind::Restore),
                    ..
                } => {
                    // A spilled allocation's bytes leave its pool's device memory until restored.
                    let id = if *kind == TransferKind::Spill {
                        from
                    } else {
                        to
                    };
                    let moved = if *kind == TransferKind::Spill {
                        away.insert(*id)
                    } else {
                        away.remove(id)
                    };
                    if let Some(&(pool, size)) = sizes.get(id).filter(|_| moved) {
                        let v = in_use.entry(pool).or_default();
                        if *kind == TransferKind::Spill {
                            *v = v.saturating_sub(u128::from(size));
                        } else {
                            *v += u128::from(size);
                        }
                        let v = *v;
                        counter(&mut lines, "in use", pool, ev.time_ns, v);
                    }
                }
                EventKind::BlockReserve { pool, size, .. }
                | EventKind::BlockRelease { pool, size, .. } => {
                    let v = reserved.entry(pool.as_str()).or_default();
                    if matches!(ev.kind, EventKind::BlockReserve { .. }) {
                        *v += u128::from(*size);
                    } else {
                        *v = v.saturating_sub(u128::from(*size));
                    }
                    let v = *v;
                    counter(&mut lines, "reserved", pool, ev.time_ns, v);
                }
                EventKind::Kv {
                    used,
                    cached,
                    free,
                    tokens,
                    ..
                } => {
                    let pid = pools.len() + 1;
                    if !kv_named {
                        kv_named = true;
                        lines.push(format!(
                            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"kv cache\"}}}}"
                        ));
                    }
                    let t = us(ev.time_ns);
                    lines.push(format!(
                        "{{\"ph\":\"C\",\"name\":\"blocks\",\"pid\":{pid},\"tid\":0,\"ts\":{t},\"args\":{{\"used\":{used},\"cached\":{cached},\"free\":{free}}}}}"
                    ));
                    lines.push(format!(
                        "{{\"ph\":\"C\",\"name\":\"tokens\",\"pid\":{pid},\"tid\":0,\"ts\":{t},\"args\":{{\"tokens\":{tokens}}}}}"
                    ));
                }
                _ => {}
            }
        }
        // Lifetimes as slices, rows assigned first fit.
        let end_ns = self.events.last().map_or(0, |e| e.time_ns);
        let mut rows: HashMap<String, Vec<u64>> = HashMap::new();
        for l in self.lifetimes() {
            let free_ns = l.free_ns.unwrap_or(end_ns);
            let pool_rows = rows.entry(l.pool.clone()).or_default();
            let row = match pool_rows
                .iter()
                .position(|&busy_until| busy_until <= l.alloc_ns)
            {
                Some(r) => {
                    pool_rows[r] = free_ns;
                    r
                }
                None => {
                    pool_rows.push(free_ns);
                    pool_rows.len() - 1
                }
            };
            let tid = row + 1;
            let mut s = String::from("{\"ph\":\"X\",\"name\":");
            write_str(
                &mut s,
                if l.label.is_empty() {
                    "<unlabelled>"
                } else {
                    &l.label
                },
            );
            s.push_str(",\"cat\":");
            write_str(&mut s, &l.pool);
            let _ = write!(
                s,
                ",\"pid\":{},\"tid\":{tid},\"ts\":{},\"dur\":{},\"args\":{{\"id\":{},\"size\":{},\"offset\":{},\"leaked\":{}}}}}",
                pid(&l.pool),
                us(l.alloc_ns),
                us(free_ns.saturating_sub(l.alloc_ns)),
                l.id,
                l.size,
                l.offset,
                l.free_ns.is_none()
            );
            lines.push(s);
            for &(step, access, size) in &l.uses {
                let mut u = String::from("{\"ph\":\"i\",\"s\":\"t\",\"name\":");
                let name = match &self.events[step].kind {
                    EventKind::Use { op, .. } => op.as_str(),
                    EventKind::Upload { .. } => "upload",
                    EventKind::Transfer { kind, .. } => kind.name(),
                    _ => "download",
                };
                write_str(&mut u, name);
                let _ = write!(
                    u,
                    ",\"pid\":{},\"tid\":{tid},\"ts\":{},\"args\":{{\"access\":\"{}\",\"size\":{size}}}}}",
                    pid(&l.pool),
                    us(self.events[step].time_ns),
                    access.name()
                );
                lines.push(u);
            }
        }
        let mut out = String::from("{\"displayTimeUnit\":\"ns\",\n\"traceEvents\":[\n");
        out.push_str(&lines.join(",\n"));
        let _ = write!(out, "\n],\n\"{RAW_KEY}\":[\n");
        push_events(&mut out, &self.events);
        out.push_str("]}\n");
        out
    }
}
