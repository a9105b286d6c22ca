//! Refusals of a call's arguments, shared by the planners and the runtime.
//!
//! Each variant names one rule an argument can break (a count of zero, an index past its range, a
//! value that is not a multiple of another, ...) and carries what was given and what the rule
//! allows, so a message says what to change. Defined here, in the lowest crate, so the planners
//! and `tensormem::Error::Argument` hold the same type and no mapping can drift.

/// An argument that breaks a rule of the call it is passed to. Hopeless as given: retrying the
/// same call fails the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// A count, dimension or collection that must be at least 1 is 0 (or empty).
    #[error("{what} is 0: it must be at least 1")]
    Zero {
        /// What is zero ("tile parts", "softmax dimension rows", "prompt tokens").
        what: String,
    },

    /// More of something than the call supports.
    #[error("{what}: {count} given, at most {limit} supported")]
    TooMany {
        /// What is counted ("buffers", "portfolio threads (0 = every core)").
        what: String,
        /// How many were given.
        count: u64,
        /// The most the call supports.
        limit: u64,
    },

    /// An index past the end of what it indexes.
    #[error("{what} {index} is out of range 0..{len}")]
    OutOfRange {
        /// What is indexed ("KV layer", "tensor of op 3").
        what: String,
        /// The index given.
        index: u64,
        /// How many there are (valid indices are `0..len`).
        len: u64,
    },

    /// A quantity that must be a multiple of another is not.
    #[error("{what} ({value}) is not a multiple of {of} ({divisor})")]
    NotMultiple {
        /// The quantity ("add len", "softmax rows", "paged_attention query heads").
        what: String,
        /// Its value.
        value: u64,
        /// What it must be a multiple of ("b_len", "rows_per_mask", "KV heads").
        of: String,
        /// That divisor's value.
        divisor: u64,
    },

    /// A value outside the set the call accepts (a name it does not know, a combination it
    /// rejects, a number outside its domain).
    #[error("invalid {what} `{value}`: expected {expected}")]
    Invalid {
        /// What the value is for (an option, a parameter, a field).
        what: String,
        /// The value given, as written.
        value: String,
        /// What the call accepts.
        expected: String,
    },

    /// A tensor read before anything writes it (and not an input, whose value the caller gives).
    #[error("{reader} reads tensor {tensor} before anything writes it")]
    ReadBeforeWrite {
        /// The tensor (index or name).
        tensor: String,
        /// Who reads it ("op 3", "node 'attn'").
        reader: String,
    },

    /// An op that writes a graph input, whose value belongs to the caller.
    #[error("{writer} writes tensor {tensor}, a graph input")]
    WritesInput {
        /// The tensor (index or name).
        tensor: String,
        /// Who writes it ("op 3").
        writer: String,
    },

    /// Two buffers that are live at the same time and share bytes.
    #[error(
        "buffers {first} and {second} overlap: buffer {first} lives [{}, {}) at bytes [{}, {}), \
         buffer {second} lives [{}, {}) at bytes [{}, {})",
        .first_lifetime[0], .first_lifetime[1], .first_bytes[0], .first_bytes[1],
        .second_lifetime[0], .second_lifetime[1], .second_bytes[0], .second_bytes[1]
    )]
    BuffersOverlap {
        /// The first buffer's name.
        first: String,
        /// Its lifetime `[lower, upper)`.
        first_lifetime: [u64; 2],
        /// Its bytes `[offset, end)`.
        first_bytes: [u64; 2],
        /// The second buffer's name.
        second: String,
        /// Its lifetime `[lower, upper)`.
        second_lifetime: [u64; 2],
        /// Its bytes `[offset, end)`.
        second_bytes: [u64; 2],
    },

    /// A region handed back to a sub-allocator whose offset or size is not what its slot holds
    /// (edited, or another allocator's).
    #[error(
        "region at offset {offset} of {size} bytes does not match its {slot_kind} {slot} \
         (offset {slot_offset}, {slot_size} bytes)"
    )]
    RegionMismatch {
        /// The region's offset, in bytes.
        offset: u64,
        /// The region's size, in bytes.
        size: u64,
        /// What the allocator calls its slot ("block", "slot").
        slot_kind: &'static str,
        /// The slot's index.
        slot: u32,
        /// The offset the slot holds, in bytes.
        slot_offset: u64,
        /// The bytes the slot holds.
        slot_size: u64,
    },
}

impl ArgumentError {
    /// [`ArgumentError::Zero`] for `what`.
    pub fn zero(what: impl Into<String>) -> Self {
        ArgumentError::Zero { what: what.into() }
    }

    /// [`ArgumentError::TooMany`]: `count` of `what` where at most `limit` are supported.
    pub fn too_many(what: impl Into<String>, count: u64, limit: u64) -> Self {
        ArgumentError::TooMany {
            what: what.into(),
            count,
            limit,
        }
    }

    /// [`ArgumentError::OutOfRange`]: `index` into `len` of `what`.
    pub fn out_of_range(what: impl Into<String>, index: u64, len: u64) -> Self {
        ArgumentError::OutOfRange {
            what: what.into(),
            index,
            len,
        }
    }

    /// [`ArgumentError::NotMultiple`]: `what` = `value` is not a multiple of `of` = `divisor`.
    pub fn not_multiple(
        what: impl Into<String>,
        value: u64,
        of: impl Into<String>,
        divisor: u64,
    ) -> Self {
        ArgumentError::NotMultiple {
            what: what.into(),
            value,
            of: of.into(),
            divisor,
        }
    }

    /// [`ArgumentError::Invalid`]: `value` given for `what`, where the call takes `expected`.
    pub fn invalid_value(
        what: impl Into<String>,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        ArgumentError::Invalid {
            what: what.into(),
            value: value.into(),
            expected: expected.into(),
        }
    }
}
