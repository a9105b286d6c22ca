//! What carves the arena pool's blocks: TLSF, or buddy where the configuration picks it
//! ([`ArenaConfig::carver`]). One enum, so the block code is the same for both; the methods only
//! TLSF has (placement at an offset, growth at the end) serve the arena that grows in place,
//! which the pool builds only with TLSF.

use tensormem_plan::Error as PlanError;

use super::ArenaConfig;
use crate::suballoc::{Buddy, Landmark, Region, SubAllocReport, Tlsf};
use crate::{Error, Result};

/// Which sub-allocator carves an [`ArenaPool`](super::ArenaPool)'s blocks
/// ([`ArenaConfig::carver`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Carver {
    /// TLSF (the default): good fit, every byte of a block usable, and the arena that grows in
    /// place where the backend can.
    #[default]
    Tlsf,
    /// Buddy: each request holds a block of the next power of two (at least the pool's base
    /// alignment), merged with its buddy when freed. The pool adds blocks instead of growing in
    /// place, each at least the next power of two of its first request. More bytes held per
    /// request (see `docs/performance.md`); for power-of-two sizes and fixed-size pages.
    Buddy,
}

/// A block's sub-allocator.
#[derive(Debug)]
pub(super) enum Carving {
    Tlsf(Tlsf),
    Buddy(Buddy),
}

/// Applies `$call` to whichever allocator `$carving` holds.
macro_rules! either {
    ($carving:expr, $a:ident => $call:expr) => {
        match $carving {
            Carving::Tlsf($a) => $call,
            Carving::Buddy($a) => $call,
        }
    };
}

impl Carving {
    /// A `carver` over `[0, capacity)`; buddy blocks are at least `min_block` bytes.
    pub(super) fn new(carver: Carver, capacity: u64, min_block: u64) -> Result<Self> {
        Ok(match carver {
            Carver::Tlsf => Carving::Tlsf(Tlsf::new(capacity)?),
            Carver::Buddy => Carving::Buddy(Buddy::with_min_block(capacity, min_block)?),
        })
    }

    /// Carves a request; `Ok(None)` also for one larger than this block can ever hold (a
    /// buddy block's largest power of two), which another block may.
    pub(super) fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        match either!(self, a => a.allocate(size, align)) {
            Err(PlanError::TooLarge { .. }) => Ok(None),
            other => Ok(other?),
        }
    }

    /// Frees `region`; returns the free block it became part of, as (offset, size).
    pub(super) fn free_merged(&mut self, region: Region) -> Result<(u64, u64)> {
        Ok(either!(self, a => a.free_merged(region))?)
    }

    pub(super) fn is_empty(&self) -> bool {
        either!(self, a => a.is_empty())
    }

    pub(super) fn free_bytes(&self) -> u64 {
        either!(self, a => a.free_bytes())
    }

    pub(super) fn capacity(&self) -> u64 {
        either!(self, a => a.capacity())
    }

    pub(super) fn report(&self) -> SubAllocReport {
        either!(self, a => a.report())
    }

    pub(super) fn check_invariants(&self) -> std::result::Result<(), String> {
        either!(self, a => a.check_invariants())
    }

    /// [`Tlsf::allocate_at`]; buddy finds no room there.
    pub(super) fn allocate_at(
        &mut self,
        offset: u64,
        size: u64,
        align: u64,
        near: Option<Landmark>,
    ) -> Result<Option<Region>> {
        match self {
            Carving::Tlsf(t) => Ok(t.allocate_at(offset, size, align, near)?),
            Carving::Buddy(_) => Ok(None),
        }
    }

    /// [`Tlsf::extend_region`]; buddy never widens a region.
    pub(super) fn extend_region(&mut self, region: &mut Region, by: u64) -> Result<bool> {
        match self {
            Carving::Tlsf(t) => Ok(t.extend_region(region, by)?),
            Carving::Buddy(_) => Ok(false),
        }
    }

    /// [`Tlsf::allocate_at_end`]; buddy finds no room there.
    pub(super) fn allocate_at_end(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        match self {
            Carving::Tlsf(t) => Ok(t.allocate_at_end(size, align)?),
            Carving::Buddy(_) => Ok(None),
        }
    }

    /// [`Tlsf::free_tail`]; 0 for buddy, which never grows.
    pub(super) fn free_tail(&self) -> u64 {
        match self {
            Carving::Tlsf(t) => t.free_tail(),
            Carving::Buddy(_) => 0,
        }
    }

    /// [`Tlsf::grow`]; an error for buddy.
    pub(super) fn grow(&mut self, by: u64) -> Result<()> {
        match self {
            Carving::Tlsf(t) => Ok(t.grow(by)?),
            Carving::Buddy(_) => Err(Self::fixed()),
        }
    }

    /// [`Tlsf::shrink`]; an error for buddy.
    pub(super) fn shrink(&mut self, by: u64) -> Result<()> {
        match self {
            Carving::Tlsf(t) => Ok(t.shrink(by)?),
            Carving::Buddy(_) => Err(Self::fixed()),
        }
    }

    fn fixed() -> Error {
        Error::invariant("only a TLSF-carved block changes size", "buddy")
    }
}

impl Carver {
    /// The bytes of a new block for a first request of `size` bytes, from the policy's
    /// `bytes`: buddy needs a top block of the request's next power of two, so at least that.
    pub(super) fn block_bytes(self, bytes: u64, size: u64) -> Option<u64> {
        match self {
            Carver::Tlsf => Some(bytes),
            Carver::Buddy => size.checked_next_power_of_two().map(|p| bytes.max(p)),
        }
    }

    /// Whether a pool with `config` may grow an arena in place (TLSF only).
    pub(super) fn grows_in_place(config: &ArenaConfig) -> bool {
        config.in_place && config.carver == Carver::Tlsf
    }
}

#[cfg(test)]
mod tests;
