//! The error type of the planners and sub-allocators.
//!
//! One variant per rule, each carrying the numbers a caller needs. The variants are the subset of
//! the runtime's `tensormem::Error` that pure code can raise, with the same names, fields and
//! messages; the runtime maps each onto its own variant one to one. The enum is exhaustive on
//! purpose: a new variant fails that mapping's build until it is given a place.

mod argument;

pub use argument::ArgumentError;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every refusal of the planners and sub-allocators. Nothing here panics on bad input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request for zero bytes.
    #[error("zero-size request: {what} of 0 bytes (every {what} must be at least 1 byte)")]
    ZeroSize {
        /// What was requested ("allocation", "buffer", ...).
        what: &'static str,
    },

    /// An alignment that is zero, not a power of two, or above the largest supported alignment.
    #[error(
        "invalid alignment {align}: alignments must be powers of two between 1 and {max} bytes"
    )]
    InvalidAlignment {
        /// The alignment asked for, in bytes.
        align: u64,
        /// The largest alignment supported, in bytes.
        max: u64,
    },

    /// A request that can never succeed in this range, whatever is freed first.
    #[error("{what} of {requested} bytes exceeds the limit of {limit} bytes ({limit_name})")]
    TooLarge {
        /// What was requested.
        what: &'static str,
        /// Bytes asked for.
        requested: u64,
        /// The limit, in bytes.
        limit: u64,
        /// Where the limit comes from.
        limit_name: &'static str,
    },

    /// A handle freed twice.
    #[error("double free of {what} (slot {slot}, generation {generation}): it was already freed")]
    DoubleFree {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The generation the handle carries.
        generation: u32,
    },

    /// A handle used after it was freed (its slot has moved on to a later generation).
    #[error(
        "use after free: {what} (slot {slot}, generation {generation}) was freed; the slot is now at generation {current}"
    )]
    StaleHandle {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The generation the handle carries.
        generation: u32,
        /// The slot's current generation.
        current: u32,
    },

    /// A handle that this allocator never issued (another allocator's, or forged).
    #[error("{what} handle (slot {slot}) does not belong to this {owner}")]
    ForeignHandle {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The kind of object asked to use it.
        owner: &'static str,
    },

    /// A byte range that does not fit inside the range it addresses.
    #[error(
        "range out of bounds: offset {offset} + size {size} exceeds {limit} bytes of the {what}"
    )]
    OutOfBounds {
        /// What the range addresses.
        what: &'static str,
        /// Start of the range, in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        size: u64,
        /// Length of the addressed object, in bytes.
        limit: u64,
    },

    /// Two sizes or counts that must agree do not.
    #[error("size mismatch in {what}: expected {expected}, got {actual}")]
    SizeMismatch {
        /// What was being matched.
        what: String,
        /// The size or count expected.
        expected: u64,
        /// The size or count given.
        actual: u64,
    },

    /// An offset that is not a multiple of the alignment asked for.
    #[error("misaligned {what}: {value} is not a multiple of {align} bytes ({align_name})")]
    Misaligned {
        /// What is misaligned.
        what: &'static str,
        /// The offending offset or size, in bytes.
        value: u64,
        /// The required alignment, in bytes.
        align: u64,
        /// Where the alignment comes from.
        align_name: &'static str,
    },

    /// An argument that breaks one of the call's rules.
    #[error(transparent)]
    Argument(#[from] ArgumentError),

    /// A malformed input text (a CSV plan).
    #[error("{source_name}:{line}: {message}")]
    Malformed {
        /// File name or other description of the input.
        source_name: String,
        /// 1-based line number (0 when the input has no lines).
        line: usize,
        /// What is wrong.
        message: String,
    },

    /// A planning instance whose offsets could overflow `u64`: the buffers of one time-connected
    /// group, stacked with their alignment padding, may need more than the planner's offset limit.
    /// Groups that never overlap in time are counted separately, so disjoint huge buffers plan fine.
    #[error(
        "{buffers} buffers live in one connected span of time need up to {padded_total} bytes \
         stacked (sizes plus alignment padding), beyond the planner's offset limit of {limit} bytes"
    )]
    PlanTooLarge {
        /// Buffers in the group.
        buffers: usize,
        /// Their summed size plus alignment padding, in bytes (exact, not capped).
        padded_total: u128,
        /// The largest stacked total the planner accepts, in bytes.
        limit: u64,
    },

    /// A device budget that no offload schedule can meet: at the named op, the tensors that must
    /// be on the device together (its operands, plus inputs and tensors arriving for the next op)
    /// need more bytes than the budget. Hopeless for this budget: raise it or shrink the op.
    #[error(
        "device budget of {budget} bytes is below what op {step} ('{op}') needs on the device at \
         once: {needed} bytes (its operands and whatever cannot leave around it)"
    )]
    BudgetBelowWorkingSet {
        /// Index of the op in the graph's order.
        step: usize,
        /// The op's label.
        op: String,
        /// Bytes that must be resident while it runs.
        needed: u64,
        /// The budget, in bytes.
        budget: u64,
    },

    /// A bug in the planners: an internal invariant did not hold. Made only by
    /// [`Error::invariant`]; the runtime treats it as fatal, as its own invariant errors.
    #[error("internal invariant violated ({invariant}): {detail}; please report this bug")]
    InvariantViolated {
        /// The broken invariant, named.
        invariant: &'static str,
        /// What was observed.
        detail: String,
    },
}

impl Error {
    /// The one cold path for internal bugs: an [`Error::InvariantViolated`] naming the broken
    /// invariant.
    #[cold]
    #[inline(never)]
    pub fn invariant(invariant: &'static str, detail: impl Into<String>) -> Self {
        Error::InvariantViolated {
            invariant,
            detail: detail.into(),
        }
    }

    /// `Ok` when `requested` bytes of `what` are at most `limit`, the one check behind every
    /// [`Error::TooLarge`] against a fixed limit.
    ///
    /// # Errors
    /// [`Error::TooLarge`] naming `what` and `limit_name` when `requested` exceeds `limit`.
    pub fn check_limit(
        what: &'static str,
        requested: u64,
        limit: u64,
        limit_name: &'static str,
    ) -> Result<()> {
        if requested > limit {
            return Err(Error::TooLarge {
                what,
                requested,
                limit,
                limit_name,
            });
        }
        Ok(())
    }
}
