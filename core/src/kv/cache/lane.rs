//! The KV cache's lane in a runtime's trace: an [`EventKind::Kv`] after each change of the
//! blocks' state (used, cached, free, prefix hits, swaps), none while a runtime has no tracer.
//! Appends that stay inside a block change only the token count and record nothing, so a traced
//! decode adds one event per block filled, not per token.

use super::KvCache;
use crate::trace::EventKind;

impl KvCache {
    /// Records the blocks' state when it differs from the last recorded one.
    pub(super) fn record_lane(&mut self) {
        let Some(tracer) = self.rt.tracer() else {
            return;
        };
        let s = self.ledger.stats();
        let state = [
            s.used_blocks as u64,
            s.cached_blocks as u64,
            s.free_blocks as u64,
            s.prefix_hits,
            s.swapped_blocks,
        ];
        if self.lane == Some(state) {
            return;
        }
        self.lane = Some(state);
        tracer.record(EventKind::Kv {
            used: state[0],
            cached: state[1],
            free: state[2],
            tokens: s.stored_tokens,
            hits: state[3],
            swapped: state[4],
        });
    }
}
