//! Expandable blocks through the CUDA virtual memory API: one reserved virtual address range that
//! grows and shrinks in place by mapping and unmapping physical chunks at its end.
//!
//! This is PyTorch's "expandable segments" (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`):
//! a plain arena that outgrows its block must add a second block elsewhere, so a workload whose
//! peak moves around ends with several half-used segments (fragmentation across blocks); an
//! expandable block keeps one contiguous range whose tail is mapped on demand, so the pool's
//! sub-allocator sees one range that simply got longer.
//!
//! ```text
//!  base                                   base + mapped                base + reserved
//!   |[chunk 0][chunk 1][chunk 2][chunk 3]|......... reserved, unmapped ........|
//!    cuMemCreate + cuMemMap + cuMemSetAccess per chunk; grow appends, shrink pops
//! ```
//!
//! Sizes are rounded to the chunk size, itself a multiple of the allocation granularity the driver
//! reports (`cuMemGetAllocationGranularity`, 2 MiB on current GPUs). The rounding and the
//! grow / shrink plans are pure functions tested without a GPU (`vmm/tests.rs`).

use std::ops::Range;
use std::ptr;

use cudarc::driver::sys;
use tensormem::{Error, MemoryKind, Result};

use crate::conv::to_usize;
use crate::error::{map_alloc_err, map_driver_err};

/// Rounds `size` up to a multiple of `granularity`.
///
/// # Errors
/// [`Error::InvalidAlignment`] for a zero granularity; [`Error::TooLarge`] when the rounded size
/// overflows `u64`.
pub(crate) fn round_up(size: u64, granularity: u64) -> Result<u64> {
    if granularity == 0 {
        return Err(Error::InvalidAlignment {
            align: 0,
            max: u64::MAX,
        });
    }
    size.div_ceil(granularity)
        .checked_mul(granularity)
        .ok_or(Error::TooLarge {
            what: "expandable block",
            requested: size,
            limit: u64::MAX - (u64::MAX % granularity),
            limit_name: "u64 after rounding to the VMM granularity",
        })
}

/// The chunk size actually used: `requested` rounded up to the granularity, at least one granule.
///
/// # Errors
/// As [`round_up`].
pub(crate) fn chunk_size(requested: u64, granularity: u64) -> Result<u64> {
    round_up(requested.max(1), granularity)
}

/// Indices of the chunks to map to grow a block of `mapped_chunks` chunks to at least `target`
/// bytes, within `reserved` bytes of address space.
///
/// # Errors
/// [`Error::TooLarge`] when `target` exceeds the reserved range.
pub(crate) fn grow_plan(
    mapped_chunks: u64,
    target: u64,
    chunk: u64,
    reserved: u64,
) -> Result<Range<u64>> {
    if target > reserved {
        return Err(Error::TooLarge {
            what: "expandable block",
            requested: target,
            limit: reserved,
            limit_name: "reserved virtual address range",
        });
    }
    let needed = target.div_ceil(chunk);
    Ok(mapped_chunks..needed.max(mapped_chunks))
}

/// Indices of the chunks to unmap to shrink a block of `mapped_chunks` chunks to the fewest
/// chunks that still hold `target` bytes (highest index first when iterated in reverse).
pub(crate) fn shrink_plan(mapped_chunks: u64, target: u64, chunk: u64) -> Range<u64> {
    let keep = target.div_ceil(chunk).min(mapped_chunks);
    keep..mapped_chunks
}

/// One reserved address range with physical chunks mapped at its start.
#[derive(Debug)]
pub(crate) struct ExpandableSegment {
    /// Start of the reserved range (a device address).
    base: sys::CUdeviceptr,
    /// Bytes of address space reserved; a multiple of `chunk`.
    reserved: u64,
    /// Bytes per physical chunk; a multiple of the granularity.
    chunk: u64,
    /// Device the chunks live on.
    device: sys::CUdevice,
    /// `handles[i]` backs `[base + i * chunk, base + (i + 1) * chunk)`. Invariant: every
    /// handle is mapped with read-write access for `device`.
    handles: Vec<sys::CUmemGenericAllocationHandle>,
}

/// The allocation properties of one chunk: pinned device memory on `device`.
pub(crate) fn chunk_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32HandleMetaData: ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The driver's minimum VMM allocation granularity for `device`, in bytes.
///
/// # Errors
/// [`Error::Unsupported`] when the device lacks VMM, or a mapped driver error.
pub(crate) fn granularity(device: sys::CUdevice) -> Result<u64> {
    let prop = chunk_prop(device);
    let mut g: usize = 0;
    // SAFETY: `g` and `prop` are valid for the call; the caller made the device's context current.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .result()
    .map_err(|e| map_driver_err("cuMemGetAllocationGranularity", e))?;
    Ok(g as u64)
}

impl ExpandableSegment {
    /// Reserves `reserve` bytes of address space (rounded up to `chunk`) on `device` and maps
    /// nothing yet. `chunk` must already be a multiple of the granularity ([`chunk_size`]).
    ///
    /// # Errors
    /// A mapped driver error (`cuMemAddressReserve`).
    pub(crate) fn reserve(device: sys::CUdevice, reserve: u64, chunk: u64) -> Result<Self> {
        let reserved = round_up(reserve.max(chunk), chunk)?;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: `base` is a valid out-pointer; alignment 0 = default, address hint 0 = any,
        // flags 0 as the API requires. The caller made the device's context current.
        unsafe {
            sys::cuMemAddressReserve(&mut base, to_usize(reserved, "expandable block")?, 0, 0, 0)
        }
        .result()
        .map_err(|e| map_driver_err("cuMemAddressReserve", e))?;
        Ok(ExpandableSegment {
            base,
            reserved,
            chunk,
            device,
            handles: Vec::new(),
        })
    }

    /// Device address of the range's start.
    pub(crate) fn base(&self) -> sys::CUdeviceptr {
        self.base
    }

    /// Bytes currently mapped (usable).
    pub(crate) fn mapped(&self) -> u64 {
        self.handles.len() as u64 * self.chunk
    }

    /// Bytes of address space reserved: the most the segment can grow to.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Maps chunks until at least `target` bytes are usable. Leaves the segment unchanged past
    /// the last chunk that mapped when a chunk fails.
    ///
    /// # Errors
    /// [`Error::TooLarge`] beyond the reserved range; [`Error::OutOfMemory`] when the driver has
    /// no physical memory for a chunk (`reserved` in its report is the mapped size).
    pub(crate) fn grow_to(&mut self, target: u64, budget: Option<u64>) -> Result<()> {
        let plan = grow_plan(self.handles.len() as u64, target, self.chunk, self.reserved)?;
        let chunk = to_usize(self.chunk, "expandable chunk")?;
        let prop = chunk_prop(self.device);
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        for index in plan {
            let addr = self.base + index * self.chunk;
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: valid out-pointer and properties; flags must be 0.
            unsafe { sys::cuMemCreate(&mut handle, chunk, &prop, 0) }
                .result()
                .map_err(|e| {
                    map_alloc_err(
                        "cuMemCreate",
                        e,
                        MemoryKind::DeviceLocal,
                        target - self.mapped(),
                        self.mapped(),
                        budget,
                    )
                })?;
            // SAFETY: `addr .. addr + chunk` lies inside the reserved range (grow_plan checked
            // `target <= reserved`) and is unmapped (chunks are mapped in index order);
            // `handle` is a fresh allocation of exactly `chunk` bytes.
            let mapped = unsafe { sys::cuMemMap(addr, chunk, 0, handle, 0) }
                .result()
                .and_then(|()| {
                    // SAFETY: the range was just mapped; one access descriptor.
                    unsafe { sys::cuMemSetAccess(addr, chunk, &access, 1) }.result()
                });
            if let Err(e) = mapped {
                // SAFETY: undo this chunk only: unmap (ignored if the map failed) and release.
                unsafe {
                    let _ = sys::cuMemUnmap(addr, chunk);
                    let _ = sys::cuMemRelease(handle);
                }
                return Err(map_alloc_err(
                    "cuMemMap",
                    e,
                    MemoryKind::DeviceLocal,
                    target - self.mapped(),
                    self.mapped(),
                    budget,
                ));
            }
            self.handles.push(handle);
        }
        Ok(())
    }

    /// Unmaps trailing chunks so that the fewest chunks holding `target` bytes stay mapped.
    ///
    /// The caller guarantees that no in-flight work touches the bytes past `target` (it waits
    /// for their tickets first, as for `free_block`).
    ///
    /// # Errors
    /// A mapped driver error; chunks already unmapped stay unmapped.
    pub(crate) fn shrink_to(&mut self, target: u64) -> Result<()> {
        let plan = shrink_plan(self.handles.len() as u64, target, self.chunk);
        let chunk = to_usize(self.chunk, "expandable chunk")?;
        for index in plan.rev() {
            let addr = self.base + index * self.chunk;
            let Some(&handle) = self.handles.last() else {
                break;
            };
            // SAFETY: chunk `index` is the last mapped one (handles.len() == index + 1) and no
            // work uses it (caller's guarantee).
            unsafe { sys::cuMemUnmap(addr, chunk) }
                .result()
                .map_err(|e| map_driver_err("cuMemUnmap", e))?;
            self.handles.pop();
            // SAFETY: the handle is no longer mapped anywhere.
            unsafe { sys::cuMemRelease(handle) }
                .result()
                .map_err(|e| map_driver_err("cuMemRelease", e))?;
        }
        Ok(())
    }

    /// Unmaps and releases every chunk and frees the address range.
    ///
    /// # Errors
    /// The first driver error; the segment is then partly released.
    pub(crate) fn release(&mut self) -> Result<()> {
        self.shrink_to(0)?;
        if self.reserved > 0 {
            // SAFETY: nothing is mapped in the range any more; it was reserved with this size.
            unsafe { sys::cuMemAddressFree(self.base, to_usize(self.reserved, "reserve")?) }
                .result()
                .map_err(|e| map_driver_err("cuMemAddressFree", e))?;
            self.reserved = 0;
        }
        Ok(())
    }
}

impl Drop for ExpandableSegment {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `free_block` calls `release` and reports them.
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests;
