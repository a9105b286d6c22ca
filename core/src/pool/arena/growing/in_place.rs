//! The arena that grows in place: one reservation of address space, carved by one TLSF, whose
//! committed size follows the live set ([`Extensions::growable`]).
//!
//! Blocks cannot be merged, so a pool of blocks loses memory at every boundary: a tensor that
//! fits in the sum of two blocks' free space fits in neither, and a block pinned by one small
//! tensor holds its whole size. One arena that grows has no boundaries: its TLSF sees every free
//! byte, so the peak of committed memory follows the peak of the live set up to TLSF's own
//! fragmentation and the growth step. This is what PyTorch's expandable segments do with CUDA's
//! virtual memory management.
//!
//! What is left above the live peak is online placement, not TLSF: exact best fit over the same
//! growing range peaks at the same bytes on every issue 14 trace (the `pool_traces` benchmark
//! prints it under each trace). Placed before their lifetimes are known, a residual lands between
//! holes that later, larger feed-forward tensors cannot use. So where the backend offers holes,
//! the memory of free holes is given back and moved instead ([`holes`](super::super::holes)): the
//! address range keeps the TLSF's layout, and committed memory follows the live bytes.
//!
//! * **Reservation.** The first request reserves the whole range the pool may ever use: the
//!   budget, else the backend's [`InPlaceGrowth::max_reserve`]; address space costs nothing.
//! * **Growth.** A request that fits nowhere commits at the end exactly what the free tail lacks
//!   (with alignment padding), but at least [`GROWTH_STEP_DIVISOR`]⁻¹ of the committed size:
//!   a growth step that bounds the overshoot to about 3 % while keeping the number of driver
//!   calls logarithmic in the peak. Sizes are rounded to the backend's granularity.
//! * **Growth in whole units** ([`InPlaceGrowth::whole_units`], CUDA). The arena is extended
//!   without memory ([`Growable::extend_block`]), by at least [`MIN_UNIT`], and the request and
//!   the step past it are backed like any range with holes: spare units moved there first, one
//!   new unit for the rest. Committed at the end instead, a growth would be a new unit beside
//!   spare units no hole can take (`docs/decisions/arena-min-unit.md`). A backend without
//!   `extend_block` gets the committed growth.
//! * **Release.** Trim (and the pressure path) decommits the free tail, rounded down to the
//!   granularity (on CUDA, down to the end of the growth step that holds the new end: each
//!   step is mapped as one allocation), and returns the whole reservation when the arena is
//!   empty. Free space inside the arena is given back by [`holes`](super::holes) where the
//!   backend can; elsewhere it stays committed.
//! * **Fallback.** When the reservation is full, the backend refuses the growth or the budget
//!   refuses it, the arena pool adds regular blocks ([`growth`](super::super::growth)) beside it.

use super::super::carved::Place;
use super::super::holes::{Holes, MIN_GRANULE};
use super::{ArenaState as State, GrowingArena};
use crate::align::align_up;
use crate::backend::{BlockId, InPlaceGrowth};
use crate::suballoc::Region;
use crate::{Error, Result};

#[cfg(doc)]
use crate::backend::{Backend, Growable};

/// The growth step is at least the committed size divided by this (so at most ~3 % above need).
pub const GROWTH_STEP_DIVISOR: u64 = 32;

/// An extended growth (whole units, [`Growable::extend_block`]) is at least this, up to half
/// the committed size (a small pool is not doubled): its new memory is one physical allocation
/// on CUDA, and tensors of a few megabytes grown one at a time would make one each. PyTorch's
/// caching allocator rounds requests of 1–10 MiB up to 20 MiB segments for the same reason; a
/// unit that large, held beside the feed-forward tensors, is what a peak is made of
/// (`docs/decisions/arena-min-unit.md` has the sizes tried).
pub const MIN_UNIT: u64 = 12 << 20;

/// Bytes to commit at the end of an arena of `committed` bytes whose free tail lacks `deficit`
/// bytes: the deficit, raised to the growth step, rounded to `granularity`; falls back to the
/// deficit alone when the step does not fit in `room`. `None` when not even the deficit fits.
pub(crate) fn growth_bytes(
    deficit: u64,
    committed: u64,
    granularity: u64,
    room: u64,
) -> Option<u64> {
    let step =
        align_up(deficit.max(committed / GROWTH_STEP_DIVISOR), granularity).filter(|s| *s <= room);
    step.or_else(|| align_up(deficit, granularity).filter(|s| *s <= room))
}

impl GrowingArena {
    /// Serves a request that fits nowhere by reserving the arena or growing it. `Ok(None)` when
    /// the pool has no in-place growth or cannot grow (the caller then adds a block).
    pub(super) fn grow_in_place(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>> {
        let growth = self.kind.growth;
        match Self::arena(st) {
            None => self.reserve_arena(st, growth, size, align, label),
            Some(index) => {
                Ok(self
                    .extend_arena(st, growth, index, size, align)?
                    .map(|(region, grown)| Place {
                        block: index,
                        region,
                        fresh_block: false,
                        grown,
                    }))
            }
        }
    }

    /// Reserves the arena with room for one request of `size` bytes committed.
    fn reserve_arena(
        &self,
        st: &mut State,
        growth: InPlaceGrowth,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>> {
        let g = growth.granularity;
        let limit = self.budget.limit().unwrap_or(u64::MAX);
        let reserve = growth.max_reserve.min(limit) & !(g - 1);
        let Some(bytes) = align_up(size, g).filter(|b| *b <= reserve) else {
            return Ok(None);
        };
        if !self.budget.try_reserve(bytes) {
            return Ok(None);
        }
        let label = format!("tensormem {} arena for {label}", self.config.name);
        let Some(id) = self.reserve_charged(st, bytes, reserve, &label)? else {
            return Ok(None);
        };
        let (carving, region) = self.carve_fresh(id, bytes, size, align)?;
        let role = self.kind.arena(reserve, bytes);
        let index = self.install(st, id, bytes, carving, role);
        Ok(Some(Place {
            block: index,
            region,
            fresh_block: true,
            grown: 0,
        }))
    }

    /// Commits more of the arena at `index` and carves the request from its end; returns the
    /// region and the bytes committed for it. `Ok(None)` when the reservation, the budget or the
    /// backend has no room.
    fn extend_arena(
        &self,
        st: &mut State,
        growth: InPlaceGrowth,
        index: usize,
        size: u64,
        align: u64,
    ) -> Result<Option<(Region, u64)>> {
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return Err(Error::invariant("the arena index names a block", "none"));
        };
        let (id, committed) = (b.id, b.size);
        let reserved = b.role.reserved;
        let tail = b.carving.free_tail();
        let tail_start = committed - tail;
        let Some(need) = align_up(tail_start, align)
            .and_then(|start| start.checked_add(size))
            .map(|end| end - tail_start)
        else {
            return Ok(None);
        };
        // A tail that fits but was passed over by the good-fit search is taken as it is.
        let deficit = need.saturating_sub(tail);
        // The growth for a deficit of `d` bytes: at least `least`, where the step and `room`
        // allow.
        let step = |d: u64, least: u64, room: u64| match d {
            0 => Some(0),
            d => growth_bytes(d.max(least.min(room)), committed, growth.granularity, room),
        };
        // With whole units the arena is extended without memory, by at least `MIN_UNIT`, and
        // the growth is backed by moved spare units first (below), so none goes back for it.
        let whole = b.role.holes.as_ref().is_some_and(Holes::whole_units);
        let room = (reserved - committed).min(self.budget.room());
        let extension = match step(deficit, MIN_UNIT.min(committed / 2), room) {
            Some(a) if whole && a > 0 && self.extend(st, index, id, committed + a)? => Some(a),
            _ => None,
        };
        let extended = extension.is_some();
        if deficit > 0 && growth.holes && !extended {
            // Spare memory in holes goes back first, as much as the growth would take the pool
            // past its allowance: its memory grows only by what no hole can give. (A refusal
            // keeps it; growth goes on.)
            let step = growth_bytes(deficit, committed, growth.granularity, u64::MAX);
            let shift = st
                .blocks
                .get(index)
                .and_then(Option::as_ref)
                .and_then(|b| b.role.holes.as_ref())
                .map_or(growth.granularity.max(MIN_GRANULE), Holes::granule)
                .trailing_zeros();
            let over = (st.stats.reserved + step.unwrap_or(0))
                .saturating_sub(Self::allowance(st, size, shift));
            if over > 0 {
                let _ = self.release_spare(st, index, tail_start, over);
            }
        }
        let room = (reserved - committed).min(self.budget.room());
        let Some(add) = extension.or_else(|| step(deficit, 0, room)) else {
            return Ok(None);
        };
        if add > 0 && !extended {
            if !self.budget.try_reserve(add) {
                return Ok(None);
            }
            // Growth commits exactly what was asked (the contract).
            if let Err(e) = Self::remember_loss(
                st,
                self.growable()
                    .and_then(|g| g.resize_block(id, committed + add)),
            ) {
                self.budget.release(add);
                return match e {
                    Error::OutOfMemory(_) => Ok(None),
                    e => Err(e),
                };
            }
            self.resized(st, index, committed, committed + add)?;
        }
        let Some(b) = st.blocks[index].as_mut() else {
            return Err(Error::invariant("the arena index names a block", "none"));
        };
        // A request of a granule or more ends on a granule boundary where the tail has room:
        // the slack of its last granule lies below it, where the free space joins it when its
        // neighbour is freed, instead of above it, where only a smaller request fits before
        // the arena grows again (MobileNet at 2 MiB: a 1.1 MiB tensor after a 4.6 MiB one
        // found 0.7 MiB below and 0.6 MiB above, and took a fourth granule). Smaller requests
        // pack from the tail's start, where the next small ones follow.
        let unit = b
            .role
            .holes
            .as_ref()
            .map_or(growth.granularity, Holes::granule);
        let top = align_up(tail_start, align)
            .filter(|_| size >= unit)
            .and_then(|start| start.checked_add(size))
            .and_then(|end| align_up(end, unit))
            .map(|end| (end - size) & !(align - 1))
            .filter(|offset| offset + size <= b.size);
        let at_top = match top {
            Some(offset) => b.carving.allocate_at(offset, size, align, None)?,
            None => None,
        };
        let region = match at_top {
            Some(region) => region,
            None => b.carving.allocate_at_end(size, align)?.ok_or_else(|| {
                Error::invariant(
                    "a grown arena fits its request",
                    format!("{size} bytes at alignment {align}"),
                )
            })?,
        };
        let end = b.size;
        // Extended, the region and the growth step past it are backed together: spare units
        // moved in, then one new unit for the rest through the end (the step's slack is in that
        // unit, so later growths stay few).
        let backed = if extended { end - region.offset } else { 0 };
        if let Some(h) = b.role.holes.as_mut() {
            if !extended {
                // What the growth committed past the request is spare; granules of the old
                // free tail that were given back need memory again.
                let rest = b.carving.free_tail();
                h.freed(b.size - rest, rest);
            }
            // Below the region, where the tail started, is spare too.
            h.freed(tail_start, region.offset - tail_start);
        }
        let ok = if extended {
            let near = Some(region.landmark());
            self.back_range(st, index, (region.offset, backed), region.size, near)?
        } else {
            self.back(st, index, &region)?
        };
        if !ok {
            Self::unplace(st, index, region)?;
            return Ok(None);
        }
        if extended {
            let rest = region.offset + region.size;
            if let Some(h) = Self::holes(st, index) {
                h.freed(rest, end - rest);
            }
        }
        Ok(Some((region, add)))
    }

    /// Extends the arena at `index` (block `id`) to `size` bytes without memory
    /// ([`Growable::extend_block`]): `Ok(false)` where the backend does not offer it (the caller
    /// then commits the growth) or refuses it for want of address space or budget.
    fn extend(&self, st: &mut State, index: usize, id: BlockId, size: u64) -> Result<bool> {
        match Self::remember_loss(st, self.growable().and_then(|g| g.extend_block(id, size))) {
            Ok(()) => {}
            Err(Error::Unsupported { .. } | Error::OutOfMemory(_) | Error::TooLarge { .. }) => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        let Some(b) = st.blocks[index].as_mut() else {
            return Err(Error::invariant("the arena index names a block", "none"));
        };
        b.carving.grow(size - b.size)?;
        if let Some(h) = b.role.holes.as_mut() {
            h.extend(size);
        }
        b.size = size;
        Ok(true)
    }

    /// Decommits up to `at_most` bytes of the arena's free tail, rounded down to the granularity
    /// (with holes, to the arena's granule) (trim and the pressure path; an empty arena is
    /// released whole by the caller's block loop; a cancel gives back its growth). Returns the
    /// committed bytes given back. On a backend error the arena keeps its size.
    pub(super) fn shrink_arena(&self, st: &mut State, at_most: u64) -> Result<u64> {
        let growth = self.kind.growth;
        let Some(index) = Self::arena(st) else {
            return Ok(0);
        };
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return Ok(0);
        };
        // With holes the new end falls on a granule of the arena's, so no granule is cut in
        // two (the part of one past the end would be untracked).
        let unit = b
            .role
            .holes
            .as_ref()
            .map_or(growth.granularity, Holes::granule);
        let end = b.size - b.carving.free_tail();
        let Some(keep) = align_up(end.max(b.size.saturating_sub(at_most)), unit) else {
            return Ok(0);
        };
        // With whole units, the end moves past the unit it would cut.
        let keep = b
            .role
            .holes
            .as_ref()
            .map_or(keep, |h| h.unit_boundary(keep));
        let cut = b.size.saturating_sub(keep);
        if cut == 0 || cut >= b.size {
            return Ok(0);
        }
        let (id, old, before) = (b.id, b.size, b.committed());
        // A backend that maps each growth as one unit keeps the unit that holds the new end.
        let now = Self::remember_loss(
            st,
            self.growable().and_then(|g| g.resize_block(id, old - cut)),
        )?;
        if now >= old {
            return Ok(0);
        }
        self.resized(st, index, old, now)?;
        // What was committed goes back (holes past the end were given back already).
        let after = st.blocks[index].as_ref().map_or(0, |b| b.committed());
        Ok(before - after)
    }
}

#[cfg(test)]
mod tests;
