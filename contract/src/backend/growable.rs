//! Blocks that grow in place: the optional capability a backend offers through
//! [`Extensions::growable`](crate::backend::Extensions::growable).
//!
//! A block from [`Growable::reserve_block`] owns a range of address space of which only a prefix
//! is backed by memory; [`Growable::resize_block`] maps or unmaps memory at its end, so the
//! offsets of everything inside it stay valid. One arena can then grow instead of adding blocks
//! that its tensors cannot span (CUDA virtual memory management, Vulkan sparse binding, the
//! host's reserve-and-commit). A backend without it keeps the default `growable()` (`None`), and
//! the pools add blocks. Where [`InPlaceGrowth::holes`] says so, ranges inside the committed size
//! can also give their memory back and have it moved elsewhere in the block
//! ([`Growable::remap_range`]), and the block can grow by a hole ([`Growable::extend_block`]).
//!
//! A reserved block is a block like any other for the rest of the contract: copies, ops and
//! mapped access reach its committed size, and [`Backend::free_block`] releases its memory and
//! its reservation.
//!
//! The capability is a trait of its own, reached through one accessor, rather than methods of
//! [`Backend`] with refusing defaults: a backend without growth writes nothing, and a caller
//! learns from one `Option` both whether growth is offered and in which unit
//! ([`Growable::in_place_growth`]). The `Validated` (in `tensormem`) front offers it exactly
//! where the backend behind it does, and checks every call as it checks the core methods.

use super::{BlockDesc, BlockId};
use crate::{Error, Result};

#[cfg(doc)]
use super::Backend;

/// How a backend grows blocks in place (see [`Growable::in_place_growth`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InPlaceGrowth {
    /// Unit of mapping in bytes, a power of two: the committed size of a reserved block is always
    /// a multiple of it (CUDA: the allocation granularity, 2 MiB on current GPUs; host: the page).
    pub granularity: u64,
    /// Largest address range one reserved block may span, in bytes (a multiple of
    /// `granularity`).
    pub max_reserve: u64,
    /// Whether ranges inside a reserved block's committed size can lose their memory and get it
    /// back, in whole granules ([`Growable::decommit_range`], [`Growable::commit_range`],
    /// [`Growable::remap_range`], [`Growable::extend_block`]): the pools then return the memory
    /// of free holes and move it where tensors need it, so committed memory follows the live
    /// bytes (the host through `madvise`, CUDA by unmapping and remapping its physical
    /// allocations).
    pub holes: bool,
    /// Whether memory comes in *units* that go back and move only whole: a unit is the range
    /// one call backed (the initial size of [`Growable::reserve_block`], one growth of
    /// [`Growable::resize_block`], one [`Growable::commit_range`]), and it stays one unit where
    /// [`Growable::remap_range`] moves it. The range of [`Growable::decommit_range`] and the
    /// source of [`Growable::remap_range`] are then unions of whole units, the target of
    /// `commit_range` and `remap_range` holds no memory, and a shrink by `resize_block` cuts no
    /// unit (CUDA: a unit is one physical allocation, which `cuMemMap` maps from its start and
    /// `cuMemUnmap` takes whole). `false` (the host's `madvise`): any whole granules. The pools
    /// keep to it either way, so a backend with units creates one allocation per call instead
    /// of one per granule.
    pub whole_units: bool,
}

impl InPlaceGrowth {
    /// `Ok` for a committed size (or reservation) of a block that grows in place: a multiple of
    /// the granularity, at most `limit` (named `limit_name`).
    ///
    /// # Errors
    /// [`Error::Misaligned`] off the granularity, [`Error::TooLarge`] above `limit`.
    pub fn check_committed(&self, size: u64, limit: u64, limit_name: &'static str) -> Result<()> {
        const WHAT: &str = "committed size of a reserved block";
        if self.granularity > 1 && !size.is_multiple_of(self.granularity) {
            return Err(Error::Misaligned {
                what: WHAT,
                value: size,
                align: self.granularity,
                align_name: "in-place growth granularity",
            });
        }
        Error::check_limit(WHAT, size, limit, limit_name)
    }

    /// Growth that reserves nothing (`max_reserve` 0, no holes). A type that implements
    /// [`Growable`] but offers it only in some configurations reports it to a direct call where
    /// [`Extensions::growable`](crate::backend::Extensions::growable) is `None`; its other methods then refuse.
    pub const NONE: InPlaceGrowth = InPlaceGrowth {
        granularity: 1,
        max_reserve: 0,
        holes: false,
        whole_units: false,
    };
}

/// Blocks that grow in place, reached through [`Extensions::growable`](crate::backend::Extensions::growable). See the module doc.
///
/// Every method keeps the contract of [`Backend`]: no panics, native failures mapped into
/// [`Error`], validated input (the front checks sizes, granules, reservations and
/// ranges before a backend sees them).
pub trait Growable: Send + Sync {
    /// The unit and limits of growth. Constant for the backend's lifetime.
    fn in_place_growth(&self) -> InPlaceGrowth;

    /// Reserves `reserve` bytes of address space as one block and backs its first `desc.size`
    /// bytes with memory. The block behaves like any other for copies, ops and mapped access over
    /// its committed size; [`Backend::free_block`] releases the memory and the reservation.
    /// `desc.size` (may be 0: nothing committed yet) and `reserve` (> 0) are multiples of
    /// [`InPlaceGrowth::granularity`], `desc.size <= reserve <= max_reserve`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a kind the backend cannot reserve,
    /// [`Error::OutOfMemory`] when address space or memory is short,
    /// [`Error::DeviceLost`].
    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId>;

    /// Changes the committed size of a reserved block to `size` bytes (a multiple of the
    /// granularity, at most its reservation) and returns the committed size. Growing maps new
    /// zeroed-or-not memory at the end and commits exactly `size`. Shrinking returns the memory
    /// past `size`, or, on a backend that maps each growth as one unit (CUDA maps a whole growth
    /// step with one allocation, which cannot be returned in part), the memory past the end of
    /// the unit that holds `size`: the result is then between `size` and the old size. The
    /// caller guarantees that no in-flight work uses bytes past `size`. Offsets below
    /// `min(old, new)` keep their contents.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a block that was not reserved,
    /// [`Error::OutOfMemory`] when memory is short (the block keeps
    /// its old size), [`Error::DeviceLost`].
    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64>;

    /// Returns the memory behind `[offset, offset + size)` of a reserved block (whole granules
    /// inside its committed size; whole units where [`InPlaceGrowth::whole_units`]) to the
    /// device. The range stays part of the block, its contents are lost, and no work may touch
    /// it until [`Growable::commit_range`] or [`Growable::remap_range`] backs it again (the pools
    /// guarantee it: the range is free). The caller guarantees that no in-flight work uses it. A
    /// decommitted range does not count as committed memory.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without [`InPlaceGrowth::holes`],
    /// [`GrowthError::CutsUnit`](crate::GrowthError::CutsUnit) for a range that cuts a unit
    /// where [`InPlaceGrowth::whole_units`], [`Error::DeviceLost`]; on
    /// error the range keeps its memory.
    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()>;

    /// Backs the decommitted range `[offset, offset + size)` of a reserved block (whole
    /// granules inside its committed size) with new memory, of unspecified contents: one new
    /// unit where [`InPlaceGrowth::whole_units`] (the range then holds no memory before).
    ///
    /// # Errors
    /// As [`Growable::decommit_range`], and [`Error::OutOfMemory`]
    /// when memory is short; on error the range stays decommitted.
    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()>;

    /// Moves the memory behind the committed range `[from, from + size)` of a reserved block to
    /// its decommitted range `[to, to + size)` (whole granules, inside its committed size, not
    /// overlapping; `from` whole units where [`InPlaceGrowth::whole_units`], which keep their
    /// boundaries at `to`): `from` is decommitted afterwards, `to` committed with unspecified
    /// contents, and no memory is allocated (CUDA maps the same physical allocations at `to`).
    /// What [`Growable::decommit_range`] then [`Growable::commit_range`] would do, without
    /// giving the memory back and asking for it again. The caller guarantees that no in-flight
    /// work uses `from`.
    ///
    /// # Errors
    /// As [`Growable::decommit_range`]; on error both ranges keep their state.
    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()>;

    /// Grows the committed size of a reserved block to `size` bytes (a multiple of the
    /// granularity, above the old size, at most its reservation) without memory: the added
    /// range is decommitted, as after [`Growable::decommit_range`], until
    /// [`Growable::commit_range`] or [`Growable::remap_range`] backs it. Where
    /// [`InPlaceGrowth::whole_units`], a growth made with [`Growable::resize_block`] is one new
    /// unit; extended instead, the range can take spare units moved from elsewhere in the block
    /// and one new unit for the rest, so memory that no other hole could use backs the growth.
    ///
    /// # Errors
    /// As [`Growable::decommit_range`] (`Unsupported` without [`InPlaceGrowth::holes`]),
    /// [`Error::TooLarge`] beyond the reservation; on error the block
    /// keeps its size.
    fn extend_block(&self, block: BlockId, size: u64) -> Result<()>;
}
