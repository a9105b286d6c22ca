//! Holes in an expandable segment ([`tensormem::Backend::decommit_range`], `commit_range`,
//! `remap_range`): with one physical allocation per chunk, a chunk can be unmapped and released
//! (a hole), mapped afresh, or unmapped and mapped elsewhere in the segment with the same
//! physical allocation (a remap: no `cuMemCreate`, the memory moves). The chunk arithmetic is
//! pure ([`chunks`]) and tested without a GPU.

use tensormem::{Error, Result};

use super::{ExpandableSegment, Mapping};
use crate::error::map_driver_err;

/// The chunk indices `[first, first + count)` of the range `[offset, offset + size)` of a
/// segment with holes of `mapped` bytes in chunks of `chunk` bytes.
///
/// # Errors
/// [`Error::Unsupported`] without holes; [`Error::Misaligned`] for a range that is not whole
/// chunks; [`Error::OutOfBounds`] past the mapped extent.
pub(crate) fn chunks(
    holes: bool,
    offset: u64,
    size: u64,
    chunk: u64,
    mapped: u64,
) -> Result<(usize, usize)> {
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
    if offset.checked_add(size).is_none_or(|end| end > mapped) {
        return Err(Error::OutOfBounds {
            what: "mapped extent of the expandable block",
            offset,
            size,
            limit: mapped,
        });
    }
    Ok(((offset / chunk) as usize, (size / chunk) as usize))
}

impl ExpandableSegment {
    /// Unmaps and releases the chunks of `[offset, offset + size)` that hold memory. On a driver
    /// error the chunks before the failing one stay given back.
    ///
    /// # Errors
    /// As [`chunks`]; a mapped driver error.
    pub(crate) fn decommit(&mut self, offset: u64, size: u64) -> Result<()> {
        let (first, count) = chunks(self.holes, offset, size, self.chunk, self.mapped)?;
        for i in first..first + count {
            if let Some(handle) = self.mappings[i].handle {
                self.unmap(i as u64 * self.chunk, self.chunk, handle, true)?;
                self.mappings[i].handle = None;
            }
        }
        Ok(())
    }

    /// Maps new memory on the holes of `[offset, offset + size)`. On failure the chunks this
    /// call mapped are given back.
    ///
    /// # Errors
    /// As [`chunks`]; [`Error::OutOfMemory`] when the driver has no memory.
    pub(crate) fn commit(&mut self, offset: u64, size: u64, budget: Option<u64>) -> Result<()> {
        let (first, count) = chunks(self.holes, offset, size, self.chunk, self.mapped)?;
        let chunk = self.chunk;
        let mut made: Vec<(usize, _)> = Vec::new();
        let mut result = Ok(());
        for i in first..first + count {
            if self.mappings[i].handle.is_some() {
                continue;
            }
            match self.map_new(i as u64 * chunk, chunk, budget) {
                Ok(h) => made.push((i, h)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let result = result.and_then(|()| self.set_access_runs(&made));
        if let Err(e) = result {
            for &(i, h) in &made {
                self.undo(i as u64 * chunk, chunk, &[h]);
            }
            return Err(e);
        }
        for (i, h) in made {
            self.mappings[i].handle = Some(h);
        }
        Ok(())
    }

    /// Moves the physical allocations of `[from, from + size)` to the holes of
    /// `[to, to + size)`, chunk by chunk (unmap, map at the new place), then sets access there.
    ///
    /// # Errors
    /// As [`chunks`]; [`Error::InvalidArgument`] when a chunk of `from` is a hole, one of `to`
    /// holds memory or the ranges overlap; a mapped driver error (chunks moved before it stay
    /// moved, and mapped).
    pub(crate) fn remap(&mut self, from: u64, to: u64, size: u64) -> Result<()> {
        let (src, count) = chunks(self.holes, from, size, self.chunk, self.mapped)?;
        let (dst, _) = chunks(self.holes, to, size, self.chunk, self.mapped)?;
        if src < dst + count && dst < src + count {
            return Err(Error::invalid("remap_range: the two ranges overlap"));
        }
        let ok = (0..count).all(|k| {
            self.mappings[src + k].handle.is_some() && self.mappings[dst + k].handle.is_none()
        });
        if !ok {
            return Err(Error::invalid(
                "remap_range: the source must hold memory and the target be a hole, chunk by chunk",
            ));
        }
        let chunk = self.chunk;
        let bytes = crate::conv::to_usize(chunk, "expandable chunk")?;
        let mut moved = Vec::new();
        for k in 0..count {
            let Mapping { handle, .. } = self.mappings[src + k];
            let Some(handle) = handle else { continue };
            self.unmap((src + k) as u64 * chunk, chunk, handle, false)?;
            self.mappings[src + k].handle = None;
            let at = self.base + (dst + k) as u64 * chunk;
            // SAFETY: `at .. at + chunk` is a hole of the reservation (checked above), and
            // `handle` is a whole physical allocation of one chunk, now mapped nowhere.
            if let Err(e) =
                unsafe { cudarc::driver::sys::cuMemMap(at, bytes, 0, handle, 0) }.result()
            {
                // SAFETY: the allocation is mapped nowhere; its memory is given back.
                unsafe {
                    let _ = cudarc::driver::sys::cuMemRelease(handle);
                }
                let _ = self.set_access_runs(&moved);
                return Err(map_driver_err("cuMemMap", e));
            }
            self.mappings[dst + k].handle = Some(handle);
            moved.push((dst + k, handle));
        }
        self.set_access_runs(&moved)
    }

    /// Sets access on the chunks `mapped` (index, handle), one call per run of adjacent chunks.
    fn set_access_runs(
        &self,
        mapped: &[(usize, cudarc::driver::sys::CUmemGenericAllocationHandle)],
    ) -> Result<()> {
        let mut k = 0;
        while k < mapped.len() {
            let start = mapped[k].0;
            let mut end = start + 1;
            while k + 1 < mapped.len() && mapped[k + 1].0 == end {
                k += 1;
                end += 1;
            }
            self.set_access(start as u64 * self.chunk, (end - start) as u64 * self.chunk)?;
            k += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
