//! What differs between the bottom pools over the shared carver ([`Carved`]): the [`Role`] a
//! block carries beside its carving, and the [`Kind`] that places, grows, trims and checks.
//! One implementation per bottom pool: [`Classes`](super::growth::Classes),
//! [`InPlace`](super::growing::InPlace), [`Dedicated`](super::expandable::Dedicated).

use std::fmt::Debug;

use super::carved::{Block, Carved, Place, State};
use crate::Result;
use crate::suballoc::Region;

/// What a block of a kind carries beside its carving.
pub(super) trait Role: Debug + Send {
    /// Bytes of the block's extent not backed by memory.
    fn decommitted(&self) -> u64 {
        0
    }

    /// Address space reserved for the block, where it can grow in place.
    fn reserved(&self) -> Option<u64> {
        None
    }

    /// The block's extent is now `extent` bytes, all committed past the old end.
    fn resized(&mut self, _extent: u64) {}
}

/// What one bottom pool's blocks are, and how it grows: the parts of allocation, free, trim and
/// cancel that differ between the kinds. The defaults are a kind with nothing to add.
pub(super) trait Kind: Sized + Send + Sync + 'static {
    type Role: Role;

    /// Places a request in the pool's blocks as they are.
    fn existing(
        pool: &Carved<Self>,
        st: &mut State<Self>,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>>;

    /// Grows the pool for a request that fits nowhere; `Ok(None)` when it cannot.
    fn grow(
        pool: &Carved<Self>,
        st: &mut State<Self>,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>>;

    /// Bytes growing would add for a request of `size` bytes ([`pending`](super::pending)).
    fn growth_step(_st: &State<Self>, size: u64) -> u64 {
        size
    }

    /// The granule the pool's allowance is counted in.
    fn granule(_st: &State<Self>) -> u64 {
        super::holes::MIN_GRANULE
    }

    /// A request of `size` at `align` was placed at `region` of block `index`.
    fn placed(_st: &mut State<Self>, _index: usize, _region: &Region, _size: u64, _align: u64) {}

    /// `freed` went back to block `index`'s carving, into the free range `merged`.
    fn released(
        _pool: &Carved<Self>,
        _st: &mut State<Self>,
        _index: usize,
        _freed: (u64, u64),
        _merged: (u64, u64),
    ) -> Result<()> {
        Ok(())
    }

    /// Gives back what the kind holds beyond empty blocks (trim); the bytes given back.
    fn trimmed(_pool: &Carved<Self>, _st: &mut State<Self>) -> Result<u64> {
        Ok(0)
    }

    /// An allocation in block `index`, for which the pool grew `grown` bytes, was cancelled and
    /// its region returned; `drained` when no queued work may still touch it.
    fn cancelled(
        _pool: &Carved<Self>,
        _st: &mut State<Self>,
        _index: usize,
        _grown: u64,
        _drained: bool,
    ) {
    }

    /// The pool's expandable allocations, where the kind makes them.
    fn expandable(_pool: &Carved<Self>) -> Option<&dyn crate::pool::Expandable> {
        None
    }

    /// The kind's invariants of block `index`.
    fn check_block(
        _st: &State<Self>,
        _index: usize,
        _block: &Block<Self::Role>,
    ) -> std::result::Result<(), String> {
        Ok(())
    }
}
