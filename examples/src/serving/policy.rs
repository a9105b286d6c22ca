//! The KV memory policies the simulator compares, behind one trait: what a request holds, when
//! it fits, and what preempting it frees.

/// How a preemption left a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preempted {
    /// Its keys and values went to host memory: `bytes` copied out (and back on resume).
    Swapped {
        /// Bytes copied out.
        bytes: u64,
    },
    /// Its memory was dropped; its tokens are recomputed on re-admission.
    Dropped,
}

/// Device KV memory in use, sampled each step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Bytes of KV memory allocated to running requests (free pool memory excluded).
    pub held_bytes: u64,
    /// Of those, bytes that hold tokens.
    pub token_bytes: u64,
}

/// A KV memory policy driven by the simulator. Requests are named by their index in the trace.
pub trait KvPolicy {
    /// The policy's name in reports.
    fn name(&self) -> &'static str;
    /// Admits request `r` holding `tokens` (its prompt, or its prompt and generated tokens after
    /// it was dropped) that will reach `total` tokens, while `running` requests run. Returns the
    /// leading tokens already cached (not recomputed), or `None` if it does not fit now.
    fn admit(&mut self, r: usize, tokens: &[u32], total: usize, running: &[usize])
    -> Option<usize>;
    /// Stores one more token of running request `r`; `false` when no memory is left (the
    /// simulator preempts a request and tries again).
    fn append(&mut self, r: usize, token: u32) -> bool;
    /// The running request to preempt when one cannot store its token: by default the most
    /// recently admitted (the last of `running`, which is in admission order).
    fn victim(&self, running: &[usize]) -> Option<usize> {
        running.last().copied()
    }
    /// Admission look-ahead `(window, passes)`: when the first waiting request does not fit,
    /// the next `window` may be admitted past it, at most `passes` times before it is admitted
    /// itself. `(0, 0)`, the default, is first come first served.
    fn lookahead(&self) -> (usize, usize) {
        (0, 0)
    }
    /// Preempts running request `r`.
    fn preempt(&mut self, r: usize) -> Preempted;
    /// Brings swapped request `r` back; the bytes copied in, or `None` if it does not fit now.
    fn resume(&mut self, r: usize, running: &[usize]) -> Option<u64>;
    /// Request `r` finished: its memory is released.
    fn finish(&mut self, r: usize);
    /// Memory in use now.
    fn usage(&self) -> Usage;
    /// Whether a request reaching `total` tokens fits when it runs alone (one that does not is
    /// rejected on arrival rather than blocking the queue forever).
    fn fits_alone(&self, total: usize) -> bool;
    /// Tokens the whole budget holds when every byte holds tokens of one request.
    fn capacity_tokens(&self) -> u64;
    /// Prefix-cache hits over lookups, for policies with a prefix cache.
    fn prefix_hit_rate(&self) -> Option<f64> {
        None
    }
}
