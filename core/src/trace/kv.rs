//! The KV cache's lane of a trace, summarised: what `tensormem-report` prints about a paged KV
//! cache (peaks of blocks and tokens, prefix hits and swaps), from the [`EventKind::Kv`] events.

use super::{EventKind, Trace};

/// A paged KV cache over a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvSummary {
    /// KV events in the trace.
    pub events: usize,
    /// Most blocks held by sequences at once.
    pub peak_used: u64,
    /// Most blocks used and cached at once.
    pub peak_held: u64,
    /// Most tokens stored at once.
    pub peak_tokens: u64,
    /// Prefix-cache hits by the end.
    pub hits: u64,
    /// Blocks swapped out or in by the end.
    pub swapped: u64,
}

impl Trace {
    /// The KV lane's summary; `None` when the trace has no KV events.
    pub fn kv_summary(&self) -> Option<KvSummary> {
        let mut s = KvSummary::default();
        for e in &self.events {
            if let EventKind::Kv {
                used,
                cached,
                tokens,
                hits,
                swapped,
                ..
            } = e.kind
            {
                s.events += 1;
                s.peak_used = s.peak_used.max(used);
                s.peak_held = s.peak_held.max(used + cached);
                s.peak_tokens = s.peak_tokens.max(tokens);
                (s.hits, s.swapped) = (hits, swapped);
            }
        }
        (s.events > 0).then_some(s)
    }
}
