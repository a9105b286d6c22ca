//! Refusals of in-place growth: the calls that change which bytes of a block hold memory
//! (`extend_block`, `commit_range`, `decommit_range`, `remap_range`). The validating front raises
//! them the same on every backend; a backend raises them for the rules only it can check (the
//! units its driver maps, the granules its sparse binding takes).

/// A growth call whose range or size does not fit the block's current layout. Nothing changed;
/// hopeless as given: ask for another range or size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrowthError {
    /// An `extend_block` whose size is not above the block's committed extent.
    #[error(
        "extend_block: block {block} has {committed} bytes committed; {size} does not extend it \
         (ask for more)"
    )]
    NotAnExtension {
        /// The block id.
        block: u64,
        /// Bytes the block has committed now.
        committed: u64,
        /// The size asked for.
        size: u64,
    },

    /// A range that must be all a hole (no memory behind it) holds memory.
    #[error("{call}: bytes [{offset}, +{size}) hold memory; the range must be all a hole")]
    NotAHole {
        /// The call ("commit_range", "the target of remap_range").
        call: &'static str,
        /// Start of the range, in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        size: u64,
    },

    /// A range that must be all memory is, at least in part, a hole.
    #[error("{call}: bytes [{offset}, +{size}) are (in part) a hole; the range must be all memory")]
    NotBacked {
        /// The call ("the source of remap_range", "host access").
        call: &'static str,
        /// Start of the range (or of its first hole), in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        size: u64,
    },

    /// A range that cuts one of the physical allocations the backend maps as a whole: decommit,
    /// commit and remap take whole units.
    #[error(
        "{call}: bytes [{offset}, +{size}) cut a physical allocation (the call takes whole units)"
    )]
    CutsUnit {
        /// The call.
        call: &'static str,
        /// Start of the range, in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        size: u64,
    },
}
