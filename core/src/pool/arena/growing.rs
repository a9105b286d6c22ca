//! The growing arena ([`InPlace`]): the bottom pool whose one block is the arena that grows in
//! place ([`in_place`]), with holes ([`holes`](super::holes)) and learned
//! placement ([`sites`](super::sites)) where the backend and the configuration allow. This
//! module says what its block is ([`Arena`]) and plugs the arena's steps into the shared
//! carver ([`Kind`]).
//!
//! Invariant: the pool holds at most one block, the arena, at index [`ARENA`]; its reservation
//! covers its extent, and held regions lie on committed, non-spare granules.

use super::ArenaConfig;
use super::carved::{Block, Carved, Kind, Place, Role, State};
use super::hints::{NoHints, PlacementHints};
use super::holes::{Holes, MIN_GRANULE};
use super::sites::Sites;
use crate::Result;
use in_place::GROWTH_STEP_DIVISOR;

mod backing;
mod check;
pub(super) mod in_place;
mod placement;
use crate::backend::InPlaceGrowth;
use crate::suballoc::Region;

/// The growing arena's kind: how the backend grows blocks, and what the configuration turns on.
pub(super) struct InPlace {
    pub(super) growth: InPlaceGrowth,
    /// Holes where the backend offers them ([`ArenaConfig::holes`]).
    holes: bool,
    /// Learned placement on the arena with holes ([`ArenaConfig::learned_placement`]).
    learned: bool,
}

impl InPlace {
    pub(super) fn new(growth: InPlaceGrowth, config: &ArenaConfig) -> Self {
        InPlace {
            growth,
            holes: growth.holes && config.holes,
            learned: config.learned_placement,
        }
    }

    /// The role of a fresh arena of `extent` bytes in a reservation of `reserved`.
    pub(super) fn arena(&self, reserved: u64, extent: u64) -> Arena {
        let g = self.growth;
        let holes = self
            .holes
            .then(|| Holes::new(g.granularity, extent, g.whole_units));
        // Learned placement serves the arena with holes: a repeated step finds its granules
        // committed and moves no memory.
        let hints: Box<dyn PlacementHints> = match self.holes && self.learned {
            true => Box::new(Sites::new(g.whole_units)),
            false => Box::new(NoHints),
        };
        Arena {
            reserved,
            holes,
            hints,
        }
    }
}

/// The arena's block: its reservation of address space, which granules hold memory where the
/// arena has holes (else every byte of its extent is committed), and its placement hints.
#[derive(Debug)]
pub(super) struct Arena {
    pub(super) reserved: u64,
    pub(super) holes: Option<Holes>,
    pub(super) hints: Box<dyn PlacementHints>,
}

impl Role for Arena {
    fn decommitted(&self) -> u64 {
        self.holes.as_ref().map_or(0, Holes::decommitted)
    }

    fn reserved(&self) -> Option<u64> {
        Some(self.reserved)
    }

    fn resized(&mut self, extent: u64) {
        if let Some(h) = self.holes.as_mut() {
            h.resize(extent);
        }
    }
}

/// Index of the arena in its pool's blocks.
pub(super) const ARENA: usize = 0;

pub(super) type GrowingArena = Carved<InPlace>;
pub(super) type ArenaState = State<InPlace>;

impl GrowingArena {
    /// The arena's index, while it is reserved.
    pub(super) fn arena(st: &ArenaState) -> Option<usize> {
        st.blocks
            .get(ARENA)
            .is_some_and(Option::is_some)
            .then_some(ARENA)
    }
}

impl Kind for InPlace {
    type Role = Arena;

    fn existing(
        pool: &GrowingArena,
        st: &mut ArenaState,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        pool.try_arena(st, size, align)
    }

    fn grow(
        pool: &GrowingArena,
        st: &mut ArenaState,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>> {
        pool.grow_in_place(st, size, align, label)
    }

    fn growth_step(st: &ArenaState, size: u64) -> u64 {
        let arena = st.blocks.get(ARENA).and_then(Option::as_ref);
        arena.map_or(size, |b| size.max(b.size / GROWTH_STEP_DIVISOR))
    }

    fn granule(st: &ArenaState) -> u64 {
        let arena = st.blocks.get(ARENA).and_then(Option::as_ref);
        arena
            .and_then(|b| b.role.holes.as_ref())
            .map_or(MIN_GRANULE, Holes::granule)
    }

    fn placed(st: &mut ArenaState, index: usize, region: &Region, size: u64, align: u64) {
        if let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) {
            b.role.hints.placed(size, align, region);
        }
    }

    fn released(
        _: &GrowingArena,
        st: &mut ArenaState,
        index: usize,
        freed: (u64, u64),
        merged: (u64, u64),
    ) -> Result<()> {
        let emptied = st.stats.in_use == 0;
        if let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) {
            if let Some(h) = b.role.holes.as_mut() {
                h.freed_region(freed, merged);
            }
            b.role.hints.freed(freed.1, emptied);
        }
        Ok(())
    }

    fn trimmed(pool: &GrowingArena, st: &mut ArenaState) -> Result<u64> {
        let mut released = 0;
        if let Some(i) = GrowingArena::arena(st) {
            released += pool.release_spare(st, i, u64::MAX, u64::MAX)?;
        }
        Ok(released + pool.shrink_arena(st, u64::MAX)?)
    }

    fn cancelled(
        pool: &GrowingArena,
        st: &mut ArenaState,
        index: usize,
        grown: u64,
        drained: bool,
    ) {
        if drained && grown > 0 && GrowingArena::arena(st) == Some(index) {
            // Give back what the arena grew for this allocation, as far as its tail is free
            // (if the backend refuses, the bytes stay committed until a trim).
            let _ = pool.shrink_arena(st, grown);
        }
    }

    fn check_block(st: &ArenaState, i: usize, b: &Block<Arena>) -> std::result::Result<(), String> {
        if i != ARENA {
            return Err(format!("block {i}: a second block beside the arena"));
        }
        match &b.role.holes {
            Some(h) => GrowingArena::check_holes(st, h, b.size),
            None => Ok(()),
        }
    }
}
