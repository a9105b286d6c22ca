//! The raw event encoding of trace files: a hand-written writer (one event per line, so errors
//! can name a line) and a `serde_json` reader that never panics on malformed input.
//!
//! Each event is one JSON object: `{"t": time_ns, "k": kind, ...fields, "bt": backtrace?}` with
//! kinds `alloc` (`id`, `pool`, `size`, `offset`, `label`, `parent`?), `free` (`id`), `reclaim`
//! (`id`), `reserve` / `release` (`pool`, `block`, `size`), `upload` / `download` (`id`, `size`),
//! `use` (`id`, `op`, `access`: `"read"` | `"write"`, `size`), `transfer` (`from`, `to`, `size`,
//! `why`: a [`TransferKind`] name), `kv` (the cache's counters).

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::{Access, EventKind, Trace, TraceEvent, TransferKind};
use crate::{Error, Result};

/// Key of the raw events array in a trace file (next to Chrome's `traceEvents`).
pub(super) const RAW_KEY: &str = "tensormemEvents";

/// Appends `s` as a JSON string literal.
pub(super) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends one event as a single-line JSON object.
pub(super) fn write_event(out: &mut String, ev: &TraceEvent) {
    let _ = write!(out, "{{\"t\":{},\"k\":", ev.time_ns);
    match &ev.kind {
        EventKind::Alloc {
            id,
            pool,
            size,
            offset,
            label,
            parent,
        } => {
            let _ = write!(
                out,
                "\"alloc\",\"id\":{id},\"size\":{size},\"offset\":{offset},\"pool\":"
            );
            write_str(out, pool);
            out.push_str(",\"label\":");
            write_str(out, label);
            if let Some(p) = parent {
                let _ = write!(out, ",\"parent\":{p}");
            }
        }
        EventKind::FreeRequested { id } => {
            let _ = write!(out, "\"free\",\"id\":{id}");
        }
        EventKind::FreeReclaimed { id } => {
            let _ = write!(out, "\"reclaim\",\"id\":{id}");
        }
        EventKind::BlockReserve { pool, block, size }
        | EventKind::BlockRelease { pool, block, size } => {
            let k = if matches!(ev.kind, EventKind::BlockReserve { .. }) {
                "reserve"
            } else {
                "release"
            };
            let _ = write!(out, "\"{k}\",\"block\":{block},\"size\":{size},\"pool\":");
            write_str(out, pool);
        }
        EventKind::Upload { id, size } => {
            let _ = write!(out, "\"upload\",\"id\":{id},\"size\":{size}");
        }
        EventKind::Download { id, size } => {
            let _ = write!(out, "\"download\",\"id\":{id},\"size\":{size}");
        }
        EventKind::Use {
            id,
            op,
            access,
            size,
        } => {
            let _ = write!(
                out,
                "\"use\",\"id\":{id},\"size\":{size},\"access\":\"{}\",\"op\":",
                access.name()
            );
            write_str(out, op);
        }
        EventKind::Transfer {
            from,
            to,
            size,
            kind,
        } => {
            let _ = write!(
                out,
                "\"transfer\",\"from\":{from},\"to\":{to},\"size\":{size},\"why\":\"{}\"",
                kind.name()
            );
        }
        EventKind::Kv {
            used,
            cached,
            free,
            tokens,
            hits,
            swapped,
        } => {
            let _ = write!(
                out,
                "\"kv\",\"used\":{used},\"cached\":{cached},\"free\":{free},\"tokens\":{tokens},\"hits\":{hits},\"swapped\":{swapped}"
            );
        }
    }
    if let Some(bt) = &ev.backtrace {
        out.push_str(",\"bt\":");
        write_str(out, bt);
    }
    out.push('}');
}

struct Reader<'a> {
    source: &'a str,
    line: usize,
}

impl Reader<'_> {
    fn err(&self, message: impl Into<String>) -> Error {
        Error::Malformed {
            source_name: self.source.to_string(),
            line: self.line,
            message: message.into(),
        }
    }

    fn u64(&self, o: &Map<String, Value>, key: &str) -> Result<u64> {
        o.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| self.err(format!("field '{key}' missing or not an unsigned integer")))
    }

    fn str(&self, o: &Map<String, Value>, key: &str) -> Result<String> {
        o.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.err(format!("field '{key}' missing or not a string")))
    }

    fn event(&self, v: &Value) -> Result<TraceEvent> {
        let o = v
            .as_object()
            .ok_or_else(|| self.err("an event must be a JSON object"))?;
        let kind = match self.str(o, "k")?.as_str() {
            "alloc" => EventKind::Alloc {
                id: self.u64(o, "id")?,
                pool: self.str(o, "pool")?,
                size: self.u64(o, "size")?,
                offset: self.u64(o, "offset")?,
                label: self.str(o, "label")?,
                parent: match o.get("parent") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(self.u64(o, "parent")?),
                },
            },
            "free" => EventKind::FreeRequested {
                id: self.u64(o, "id")?,
            },
            "reclaim" => EventKind::FreeReclaimed {
                id: self.u64(o, "id")?,
            },
            "reserve" => EventKind::BlockReserve {
                pool: self.str(o, "pool")?,
                block: self.u64(o, "block")?,
                size: self.u64(o, "size")?,
            },
            "release" => EventKind::BlockRelease {
                pool: self.str(o, "pool")?,
                block: self.u64(o, "block")?,
                size: self.u64(o, "size")?,
            },
            "upload" => EventKind::Upload {
                id: self.u64(o, "id")?,
                size: self.u64(o, "size")?,
            },
            "download" => EventKind::Download {
                id: self.u64(o, "id")?,
                size: self.u64(o, "size")?,
            },
            "use" => EventKind::Use {
                id: self.u64(o, "id")?,
                op: self.str(o, "op")?,
                size: self.u64(o, "size")?,
                access: match self.str(o, "access")?.as_str() {
                    "read" => Access::Read,
                    "write" => Access::Write,
                    other => {
                        return Err(
                            self.err(format!("access '{other}' is neither 'read' nor 'write'"))
                        );
                    }
                },
            },
            "transfer" => EventKind::Transfer {
                from: self.u64(o, "from")?,
                to: self.u64(o, "to")?,
                size: self.u64(o, "size")?,
                kind: {
                    let why = self.str(o, "why")?;
                    TransferKind::from_name(&why)
                        .ok_or_else(|| self.err(format!("unknown transfer reason '{why}'")))?
                },
            },
            "kv" => EventKind::Kv {
                used: self.u64(o, "used")?,
                cached: self.u64(o, "cached")?,
                free: self.u64(o, "free")?,
                tokens: self.u64(o, "tokens")?,
                hits: self.u64(o, "hits")?,
                swapped: self.u64(o, "swapped")?,
            },
            other => return Err(self.err(format!("unknown event kind '{other}'"))),
        };
        let backtrace = match o.get("bt") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.str(o, "bt")?),
        };
        Ok(TraceEvent {
            time_ns: self.u64(o, "t")?,
            kind,
            backtrace,
        })
    }
}

impl Trace {
    /// Reads a trace file written by [`Trace::to_chrome_json`] (or a bare JSON array of raw
    /// events). `source_name` names the input in errors.
    ///
    /// # Errors
    /// [`Error::Malformed`] with the 1-based line: invalid JSON (the parser's line), no raw events,
    /// an event with a missing or mistyped field or unknown kind (the event's line, exact for files
    /// this module wrote: one event per line), or times that go backwards.
    pub fn from_json(text: &str, source_name: &str) -> Result<Trace> {
        let root: Value = serde_json::from_str(text).map_err(|e| Error::Malformed {
            source_name: source_name.to_string(),
            line: e.line(),
            message: format!("invalid JSON: {e}"),
        })?;
        let (events, first_line) = match &root {
            Value::Array(a) => (a, line_after(text, "[")),
            Value::Object(o) => match o.get(RAW_KEY) {
                Some(Value::Array(a)) => (a, line_after(text, &format!("\"{RAW_KEY}\""))),
                _ => {
                    return Err(Error::Malformed {
                        source_name: source_name.to_string(),
                        line: 1,
                        message: format!(
                            "no '{RAW_KEY}' array: not a tensormem trace (Chrome traces from other tools carry no allocation events)"
                        ),
                    });
                }
            },
            _ => {
                return Err(Error::Malformed {
                    source_name: source_name.to_string(),
                    line: 1,
                    message: "a trace is a JSON object or array".into(),
                });
            }
        };
        let mut out = Vec::with_capacity(events.len());
        let mut last_t = 0;
        for (i, v) in events.iter().enumerate() {
            let r = Reader {
                source: source_name,
                line: first_line + i,
            };
            let ev = r.event(v)?;
            if ev.time_ns < last_t {
                return Err(r.err(format!(
                    "time {} ns is before the previous event's {last_t} ns",
                    ev.time_ns
                )));
            }
            last_t = ev.time_ns;
            out.push(ev);
        }
        Ok(Trace { events: out })
    }

    /// The raw events as a JSON array, one event per line.
    pub fn to_raw_json(&self) -> String {
        let mut out = String::from("[\n");
        push_events(&mut out, &self.events);
        out.push_str("]\n");
        out
    }
}

/// Appends the events, one per line, comma separated.
pub(super) fn push_events(out: &mut String, events: &[TraceEvent]) {
    for (i, ev) in events.iter().enumerate() {
        write_event(out, ev);
        out.push_str(if i + 1 < events.len() { ",\n" } else { "\n" });
    }
}

/// The 1-based line after the one where `needle` first occurs (1 if absent).
fn line_after(text: &str, needle: &str) -> usize {
    text.find(needle).map_or(1, |pos| {
        text[..pos].bytes().filter(|&b| b == b'\n').count() + 2
    })
}
