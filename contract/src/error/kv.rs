//! The KV cache's refusals: each names the sequence or limit involved, and each leaves the cache
//! exactly as it was before the call.

/// Why the KV cache refused an operation. Wrapped by [`crate::Error::Kv`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The sequence id was never issued by this cache.
    #[error("KV sequence {index} is unknown to this cache")]
    UnknownSequence {
        /// The id's slot.
        index: u32,
    },
    /// The sequence was freed (a double free, or use after free).
    #[error("KV sequence {index} (generation {generation}) was already freed")]
    FreedSequence {
        /// The id's slot.
        index: u32,
        /// The id's generation.
        generation: u32,
    },
    /// The sequence is preempted (swapped out or dropped) and must be resumed first.
    #[error("KV sequence {index} is {state} and must be resumed before {what}")]
    NotResident {
        /// The id's slot.
        index: u32,
        /// `swapped out` or `dropped for recomputation`.
        state: &'static str,
        /// The refused operation.
        what: &'static str,
    },
    /// The sequence is resident, so it cannot be resumed.
    #[error("KV sequence {index} is resident: only a preempted sequence can be resumed")]
    AlreadyResident {
        /// The id's slot.
        index: u32,
    },
    /// Appending would pass the configured maximum sequence length.
    #[error("KV sequence of {len} tokens cannot grow by {adding}: the maximum is {max} tokens")]
    TooLong {
        /// Tokens in the sequence now.
        len: usize,
        /// Tokens asked to be added.
        adding: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A truncation to more tokens than the sequence holds.
    #[error("KV sequence of {len} tokens cannot be truncated to {to} tokens")]
    TruncateBeyondEnd {
        /// Tokens in the sequence now.
        len: usize,
        /// The asked length.
        to: usize,
    },
    /// No block is free or evictable: the caller preempts a sequence or waits. Retryable.
    #[error("KV cache out of blocks: {needed} needed, {available} free or evictable of {capacity}")]
    OutOfBlocks {
        /// Blocks the operation needs.
        needed: usize,
        /// Blocks free or held only by the prefix cache.
        available: usize,
        /// Blocks in the cache.
        capacity: usize,
    },
    /// A geometry the layout cannot use (a zero dimension, a block size out of range, sizes that
    /// overflow, a block larger than one binding).
    #[error("KV geometry refused: {0}")]
    Geometry(String),
    /// A budget too small for one block of this geometry.
    #[error("KV budget of {budget} bytes is below one block of {block_bytes} bytes")]
    BudgetBelowBlock {
        /// The budget, in bytes.
        budget: u64,
        /// One block's bytes.
        block_bytes: u64,
    },
}

impl KvError {
    /// Whether the same call can succeed later (after frees, evictions or preemptions).
    pub fn is_retryable(&self) -> bool {
        matches!(self, KvError::OutOfBlocks { .. })
    }
}
