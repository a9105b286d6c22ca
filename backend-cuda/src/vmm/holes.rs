//! Holes in an expandable segment ([`tensormem_contract::Growable::decommit_range`], `commit_range`,
//! `remap_range`, and `extend_block`, which adds a hole at the end): each physical allocation is a unit of the contract
//! ([`tensormem_contract::InPlaceGrowth::whole_units`]), so a range of whole units can be unmapped and
//! released (a hole), a hole backed by one new allocation (one `cuMemCreate` whatever its
//! size), or whole units unmapped and mapped elsewhere in the segment (a remap: no
//! `cuMemCreate`, the memory moves). `cuMemMap` maps an allocation from its offset 0 and
//! `cuMemUnmap` takes whole mappings, so a range that cuts a unit is refused. The range
//! arithmetic is pure ([`chunks`], [`units_in`]) and tested without a GPU.

use std::collections::BTreeMap;

use tensormem_contract::{Error, GrowthError, Result};

use super::{ExpandableSegment, Mapping};
use crate::error::map_driver_err;

/// Checks the range `[offset, offset + size)` of a segment with holes of `mapped` bytes in
/// chunks of `chunk` bytes: whole chunks, non-empty, inside the extent.
///
/// # Errors
/// [`Error::Unsupported`] without holes; [`Error::Misaligned`] for a range that is not whole
/// chunks; [`Error::ZeroSize`] for an empty one; [`Error::OutOfBounds`] past the mapped extent.
pub(crate) fn chunks(holes: bool, offset: u64, size: u64, chunk: u64, mapped: u64) -> Result<()> {
    if !holes {
        return Err(Error::Unsupported {
            backend: crate::error::BACKEND,
            what: "holes in an expandable block reserved without them (CudaDesc::vmm_holes)".into(),
        });
    }
    for (value, what) in [(offset, "hole offset"), (size, "hole size")] {
        if chunk == 0 || !value.is_multiple_of(chunk) {
            return Err(Error::Misaligned {
                what,
                value,
                align: chunk,
                align_name: "expandable block chunk",
            });
        }
    }
    if size == 0 {
        return Err(Error::ZeroSize { what: "hole range" });
    }
    if offset.checked_add(size).is_none_or(|end| end > mapped) {
        return Err(Error::OutOfBounds {
            what: "mapped extent of the expandable block",
            offset,
            size,
            limit: mapped,
        });
    }
    Ok(())
}

/// The bytes an extension of a segment with holes of `mapped` bytes to `target` bytes adds:
/// whole chunks past the extent, inside the `reserved` range.
///
/// # Errors
/// As [`chunks`] for the added range (`reserved` as its limit), and
/// [`GrowthError::NotAnExtension`] when `target` does not exceed `mapped`.
pub(crate) fn extension(
    block: u64,
    holes: bool,
    mapped: u64,
    target: u64,
    chunk: u64,
    reserved: u64,
) -> Result<u64> {
    let Some(add) = target.checked_sub(mapped).filter(|a| *a > 0) else {
        return Err(GrowthError::NotAnExtension {
            block,
            committed: mapped,
            size: target,
        }
        .into());
    };
    chunks(holes, mapped, add, chunk, reserved)?;
    Ok(add)
}

/// The units (offset, size) of `units` (size by offset) inside `[offset, offset + size)`, and
/// the bytes they cover.
///
/// # Errors
/// [`GrowthError::CutsUnit`] when a unit is cut by the range's start or end (`cuMemUnmap`
/// takes whole mappings, `cuMemMap` maps whole allocations).
pub(crate) fn units_in(
    units: &BTreeMap<u64, u64>,
    offset: u64,
    size: u64,
) -> Result<(Vec<(u64, u64)>, u64)> {
    let end = offset + size;
    let cut = |at: u64| {
        units
            .range(..at)
            .next_back()
            .is_some_and(|(o, n)| o + n > at)
    };
    if cut(offset) || cut(end) {
        return Err(GrowthError::CutsUnit {
            call: "cuda: decommit, commit or remap",
            offset,
            size,
        }
        .into());
    }
    let inside: Vec<(u64, u64)> = units.range(offset..end).map(|(o, n)| (*o, *n)).collect();
    let bytes = inside.iter().map(|u| u.1).sum();
    Ok((inside, bytes))
}

impl ExpandableSegment {
    /// The sizes of the mappings by offset (for [`units_in`]).
    fn unit_sizes(&self) -> BTreeMap<u64, u64> {
        self.mappings.iter().map(|(o, m)| (*o, m.size)).collect()
    }

    /// Unmaps and releases the mappings in `[offset, offset + size)`, whole units and holes. On
    /// a driver error the mappings before the failing one stay given back.
    ///
    /// # Errors
    /// As [`chunks`] and [`units_in`]; a mapped driver error.
    pub(crate) fn decommit(&mut self, offset: u64, size: u64) -> Result<()> {
        chunks(self.holes, offset, size, self.chunk, self.mapped)?;
        let (units, _) = units_in(&self.unit_sizes(), offset, size)?;
        for (at, _) in units {
            if let Some(&Mapping { handle, size }) = self.mappings.get(&at) {
                self.unmap(at, size, handle, true)?;
                self.mappings.remove(&at);
            }
        }
        Ok(())
    }

    /// Grows the extent to `target` bytes without mapping anything: the added range is a hole
    /// until a commit or a remap backs it (no driver call).
    ///
    /// # Errors
    /// As [`extension`].
    pub(crate) fn extend_to(&mut self, block: u64, target: u64) -> Result<()> {
        extension(
            block,
            self.holes,
            self.mapped,
            target,
            self.chunk,
            self.reserved,
        )?;
        self.mapped = target;
        Ok(())
    }

    /// Backs the hole `[offset, offset + size)` with one new physical allocation.
    ///
    /// # Errors
    /// As [`chunks`]; [`GrowthError::NotAHole`] when part of the range holds memory;
    /// [`Error::OutOfMemory`] when the driver has no memory (the range stays a hole).
    pub(crate) fn commit(&mut self, offset: u64, size: u64, budget: Option<u64>) -> Result<()> {
        chunks(self.holes, offset, size, self.chunk, self.mapped)?;
        let (_, held) = units_in(&self.unit_sizes(), offset, size)?;
        if held > 0 {
            return Err(GrowthError::NotAHole {
                call: "commit_range",
                offset,
                size,
            }
            .into());
        }
        self.map_unit(offset, size, budget)
    }

    /// Moves the physical allocations of `[from, from + size)`, whole units that cover it, to
    /// the hole `[to, to + size)` (unmap, map at the same place relative to `to`), then sets
    /// access there.
    ///
    /// # Errors
    /// As [`chunks`] and [`units_in`]; [`GrowthError::NotBacked`] when the source is not all
    /// memory, [`GrowthError::NotAHole`] when the target is not all a hole, [`Error::Overlap`]
    /// when the ranges overlap; a mapped driver error (units
    /// moved before it stay moved, and mapped).
    pub(crate) fn remap(&mut self, block: u64, from: u64, to: u64, size: u64) -> Result<()> {
        chunks(self.holes, from, size, self.chunk, self.mapped)?;
        chunks(self.holes, to, size, self.chunk, self.mapped)?;
        if from < to + size && to < from + size {
            return Err(Error::Overlap {
                what: "remap_range: the source and the target".into(),
                block,
                first_offset: from,
                first_size: size,
                second_offset: to,
                second_size: size,
            });
        }
        let sizes = self.unit_sizes();
        let (units, held) = units_in(&sizes, from, size)?;
        let (_, taken) = units_in(&sizes, to, size)?;
        if held != size {
            return Err(GrowthError::NotBacked {
                call: "the source of remap_range",
                offset: from,
                size,
            }
            .into());
        }
        if taken != 0 {
            return Err(GrowthError::NotAHole {
                call: "the target of remap_range",
                offset: to,
                size,
            }
            .into());
        }
        let mut moved = Vec::new();
        for (at, bytes) in units {
            let Some(&Mapping { handle, .. }) = self.mappings.get(&at) else {
                continue;
            };
            self.unmap(at, bytes, handle, false)?;
            self.mappings.remove(&at);
            let dst = to + (at - from);
            let len = crate::conv::to_usize(bytes, "expandable unit")?;
            // SAFETY: `dst .. dst + bytes` is a hole of the reservation (checked above), and
            // `handle` is a whole physical allocation of `bytes`, now mapped nowhere.
            if let Err(e) =
                unsafe { cudarc::driver::sys::cuMemMap(self.base + dst, len, 0, handle, 0) }
                    .result()
            {
                // SAFETY: the allocation is mapped nowhere; its memory is given back.
                unsafe {
                    let _ = cudarc::driver::sys::cuMemRelease(handle);
                }
                self.set_access_all(&moved)?;
                return Err(map_driver_err("cuMemMap", e));
            }
            self.mappings.insert(
                dst,
                Mapping {
                    handle,
                    size: bytes,
                },
            );
            moved.push((dst, bytes));
        }
        self.set_access_all(&moved)
    }

    /// Sets access on the mapped ranges `moved` (offset, size).
    fn set_access_all(&self, moved: &[(u64, u64)]) -> Result<()> {
        for &(offset, size) in moved {
            self.set_access(offset, size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
