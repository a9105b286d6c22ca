//! Placement hints: the strategy the growing arena takes for where a request goes before TLSF
//! looks ([`PlacementHints`]). [`Sites`](super::sites::Sites) learns where each allocation site
//! went last time (on the arena with holes, [`ArenaConfig::learned_placement`]); [`NoHints`]
//! leaves placement to TLSF alone. The arena tells its hints every placement, free and move of
//! memory; a hint that lands on a range no longer free costs only its lookup.
//!
//! Costs: one dynamic call per event; the strategy's own (for sites, a bucket lookup per
//! request and a multiply-add per event).

use std::fmt::Debug;

use crate::suballoc::{Landmark, Region};

#[cfg(doc)]
use super::ArenaConfig;

/// Where the growing arena places a request before asking TLSF.
pub(super) trait PlacementHints: Debug + Send {
    /// Where a request of `size` bytes at `align` should go: an offset, and the landmark TLSF
    /// starts its walk from. `None` leaves it to TLSF.
    fn hint(&mut self, size: u64, align: u64) -> Option<(u64, Landmark)>;

    /// A request of `size` bytes at `align` went to `region`.
    fn placed(&mut self, size: u64, align: u64, region: &Region);

    /// A region of `size` bytes was freed; `emptied` when the pool holds nothing now.
    fn freed(&mut self, size: u64, emptied: bool);

    /// The memory of `range` (offset, length) moved to offset `to` (`near`: the landmark of the
    /// region placed there).
    fn moved(&mut self, range: (u64, u64), to: u64, near: Landmark);
}

/// Placement by TLSF alone.
#[derive(Debug)]
pub(super) struct NoHints;

impl PlacementHints for NoHints {
    fn hint(&mut self, _: u64, _: u64) -> Option<(u64, Landmark)> {
        None
    }

    fn placed(&mut self, _: u64, _: u64, _: &Region) {}

    fn freed(&mut self, _: u64, _: bool) {}

    fn moved(&mut self, _: (u64, u64), _: u64, _: Landmark) {}
}
