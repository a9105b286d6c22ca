//! Placing a request in the arena with holes: the learned hint, TLSF's place, probes past
//! decommitted granules, and with whole units the spare unit or spare run that holds it.

use super::super::carved::Block;
use super::super::holes::{Holes, PROBES};
use super::{Arena, ArenaState as State, GrowingArena};
use crate::suballoc::Region;
use crate::{Error, Result};

impl GrowingArena {
    /// The arena's holes, when it has them.
    pub(in crate::pool::arena) fn holes(st: &mut State, index: usize) -> Option<&mut Holes> {
        st.blocks
            .get_mut(index)
            .and_then(Option::as_mut)
            .and_then(|b| b.role.holes.as_mut())
    }

    /// Places a request in the arena, backing its granules with memory. `Ok(None)` when it
    /// does not fit, or the budget or the device refuses the memory it lacks.
    pub(in crate::pool::arena) fn try_arena(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        let Some(i) = Self::arena(st) else {
            return Ok(None);
        };
        let Some(b) = st.blocks[i]
            .as_mut()
            .filter(|b| b.carving.free_bytes() >= size)
        else {
            return Ok(None);
        };
        // Where the hints put it (for learned sites: where the site went last time, when that
        // range is free again).
        let hint = b.role.hints.hint(size, align);
        let hinted = match hint {
            // `align` is a power of two (checked): a mask, not a division.
            Some((offset, near)) if offset & (align - 1) == 0 => {
                b.carving.allocate_at(offset, size, align, Some(near))?
            }
            _ => None,
        };
        let Some(mut region) =
            hinted.map_or_else(|| b.carving.allocate(size, align), |r| Ok(Some(r)))?
        else {
            return Ok(None);
        };
        if let Some(h) = b.role.holes.as_mut() {
            let mut lacking = h.lacking(&region);
            if lacking > 0 {
                (region, lacking) = Self::probe(b, region, lacking, size, align)?;
            }
            if lacking == 0 {
                // Backed already (the usual case once placement is learned): no run to walk.
                if let Some(h) = b.role.holes.as_mut() {
                    h.taken(region.offset, region.size);
                }
                return Ok(Some((i, region)));
            }
            if let Some(unit) = Self::in_spare_unit(st, i, &region, size, align, lacking)? {
                Self::unplace(st, i, region)?;
                return Ok(Some((i, unit)));
            }
        }
        if self.back(st, i, &region)? {
            return Ok(Some((i, region)));
        }
        Self::unplace(st, i, region)?;
        Ok(None)
    }

    /// `region`, placed in the arena `b` with holes, lies on `lacking` decommitted granules:
    /// looks at the next few places TLSF offers and keeps the one that needs the least memory
    /// moved (the others go back). Returns it with its decommitted granules.
    fn probe(
        b: &mut Block<Arena>,
        mut region: Region,
        mut lacking: u64,
        size: u64,
        align: u64,
    ) -> Result<(Region, u64)> {
        let mut others: [Option<Region>; PROBES] = Default::default();
        for slot in &mut others {
            if lacking == 0 {
                break;
            }
            let Some(next) = b.carving.allocate(size, align)? else {
                break;
            };
            let l = b.role.holes.as_ref().map_or(0, |h| h.lacking(&next));
            *slot = Some(if l < lacking {
                lacking = l;
                std::mem::replace(&mut region, next)
            } else {
                next
            });
        }
        for r in others.into_iter().flatten() {
            let freed = (r.offset, r.size);
            let merged = b.carving.free_merged(r)?;
            if let Some(h) = b.role.holes.as_mut() {
                h.freed_region(freed, merged);
            }
        }
        Ok((region, lacking))
    }

    /// With whole units, a request placed at `region` on `lacking` decommitted granules, whose
    /// memory would take the pool past both its allowance and its peak, is carved instead in
    /// the smallest spare unit that holds it, found near `region` (which the caller returns).
    /// New memory or a unit moved there would leave a larger spare unit idle beside it, and on
    /// the transformer traces those units were what the peak was made of. Under the pool's own
    /// peak (a trimmed pool growing again) the place stays: the large units spare there are
    /// the ones the step's large tensors take moments later. Where no spare unit holds it, it
    /// goes to a run of spare granules long enough (the free part of a unit a live tensor
    /// holds: committed memory, no call). `Ok(None)` when neither holds it, or TLSF does not
    /// find the ones that do.
    fn in_spare_unit(
        st: &mut State,
        index: usize,
        region: &Region,
        size: u64,
        align: u64,
        lacking: u64,
    ) -> Result<Option<Region>> {
        let Some(shift) = Self::holes(st, index)
            .filter(|h| h.handles.is_some())
            .map(|h| h.shift)
        else {
            return Ok(None);
        };
        let s = &st.stats;
        let bound = Self::allowance(st, size, shift).max(s.peak_reserved);
        if s.reserved + (lacking << shift) <= bound {
            return Ok(None);
        }
        let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Ok(None);
        };
        let Some(h) = b.role.holes.as_mut() else {
            return Ok(None);
        };
        for offset in h.spare_unit_places(size, align).into_iter().flatten() {
            let mut unit = b
                .carving
                .allocate_at(offset, size, align, Some(region.landmark()))?;
            if unit.is_none() {
                unit = b.carving.allocate_at(offset, size, align, None)?;
            }
            if let (Some(unit), Some(h)) = (unit, b.role.holes.as_mut()) {
                h.taken(unit.offset, unit.size);
                return Ok(Some(unit));
            }
        }
        let Some(h) = b.role.holes.as_mut() else {
            return Ok(None);
        };
        // Spare granules are wholly free: TLSF holds the range, as its own block or inside one.
        for offset in h.spare_run_places(size, align).into_iter().flatten() {
            if let Some(run) = b.carving.allocate_at(offset, size, align, None)? {
                if let Some(h) = b.role.holes.as_mut() {
                    h.taken(run.offset, run.size);
                }
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    /// Returns a region that was never handed out to the arena's free space.
    pub(in crate::pool::arena) fn unplace(
        st: &mut State,
        index: usize,
        region: Region,
    ) -> Result<()> {
        let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Err(Error::invariant("the arena index names a block", "none"));
        };
        let freed = (region.offset, region.size);
        let merged = b.carving.free_merged(region)?;
        if let Some(h) = b.role.holes.as_mut() {
            h.freed_region(freed, merged);
        }
        Ok(())
    }
}
