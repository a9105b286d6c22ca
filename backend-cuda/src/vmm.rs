//! Expandable blocks through the CUDA virtual memory API: one reserved virtual address range that
//! grows and shrinks in place by mapping and unmapping physical memory at its end.
//!
//! This is PyTorch's "expandable segments" (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`):
//! a plain arena that outgrows its block must add a second block elsewhere, so a workload whose
//! peak moves around ends with several half-used segments (fragmentation across blocks); an
//! expandable block keeps one contiguous range whose tail is mapped on demand, so the pool's
//! sub-allocator sees one range that simply got longer.
//!
//! ```text
//!  base                                          base + mapped         base + reserved
//!   |[ mapping 0 ][ mapping 1 (one growth) ][ 2 ]|.... reserved, unmapped ....|
//!    one cuMemCreate + cuMemMap + cuMemSetAccess per growth; grow appends, shrink pops
//! ```
//!
//! **One mapping per growth.** A growth maps all its bytes as one physical allocation: three
//! driver calls whatever its size. Mapping one granule at a time costs three calls per 2 MiB and
//! makes in-place growth slower than reallocating and copying
//! (`docs/decisions/cuda-vmm-granule-mappings.md`). The price is on shrinking:
//! `cuMemUnmap` takes whole mappings only, so a shrink keeps the mapping that holds the new end
//! and returns the ones past it (the committed size it reports can exceed the target by up to
//! that mapping). The pools grow by steps of a thirty-second of the arena, so that is a few
//! percent of it at most.
//!
//! **Holes** (`vmm/holes.rs`, where the segment offers them): a range of whole mappings can be
//! unmapped and released, a hole backed by one new allocation, and whole mappings moved into a
//! hole (unmapped and mapped there: no `cuMemCreate`). Each mapping is a unit of the contract
//! ([`tensormem_contract::InPlaceGrowth::whole_units`]): the pools give back and move only whole ones,
//! so a growth or a commit stays one allocation however many granules it spans.
//!
//! Sizes are rounded to the chunk size, itself a multiple of the allocation granularity the driver
//! reports (`cuMemGetAllocationGranularity`, 2 MiB on current GPUs). The rounding and the
//! grow / shrink plans are pure functions tested without a GPU (`vmm/tests.rs`).

use std::collections::BTreeMap;
use std::ptr;

use cudarc::driver::sys;
use tensormem_contract::{Error, MemoryKind, Result};

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

/// Bytes of the one new mapping that grows a segment of `mapped` bytes to hold at least `target`
/// bytes, within `reserved` bytes of address space: `target` rounded up to `chunk`, less what is
/// mapped (0 when nothing is missing; growing never shrinks).
///
/// # Errors
/// [`Error::TooLarge`] when `target` exceeds the reserved range.
pub(crate) fn grow_plan(mapped: u64, target: u64, chunk: u64, reserved: u64) -> Result<u64> {
    Error::check_limit(
        "expandable block",
        target,
        reserved,
        "reserved virtual address range",
    )?;
    Ok(round_up(target, chunk)?.saturating_sub(mapped))
}

/// The extent a shrink of a segment of `mapped` bytes to `target` bytes leaves, given its
/// mappings `units` (offset, size) in address order: `target` rounded up to `chunk`, or the end
/// of the mapping that holds it (a mapping is returned whole or not at all), at most `mapped`.
///
/// # Errors
/// As [`round_up`].
pub(crate) fn shrink_end(
    units: &[(u64, u64)],
    target: u64,
    chunk: u64,
    mapped: u64,
) -> Result<u64> {
    let holder = units
        .iter()
        .find(|(offset, size)| *offset < target && offset + size > target)
        .map(|(offset, size)| offset + size);
    Ok(match holder {
        Some(end) => end,
        None => round_up(target, chunk)?,
    }
    .min(mapped))
}

/// One physical allocation mapped into the segment: a unit of the contract
/// ([`tensormem_contract::InPlaceGrowth::whole_units`]), mapped from its start and unmapped whole.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    handle: sys::CUmemGenericAllocationHandle,
    /// Bytes, a multiple of the segment's chunk.
    size: u64,
}

/// One reserved address range with physical memory mapped at its start, one mapping per growth.
#[derive(Debug)]
pub(crate) struct ExpandableSegment {
    /// Start of the reserved range (a device address).
    base: sys::CUdeviceptr,
    /// Bytes of address space reserved; a multiple of `chunk`.
    reserved: u64,
    /// Unit of every mapping's size; a multiple of the granularity.
    chunk: u64,
    /// Device the memory lives on.
    device: sys::CUdevice,
    /// Physical allocations mapped in the segment, by offset. Invariant: each is mapped with
    /// read-write access for `device`, they do not overlap and lie below `mapped`; without
    /// holes they lie back to back from `base` and their sizes sum to `mapped`.
    mappings: BTreeMap<u64, Mapping>,
    /// Bytes of the extent from `base` (holes included).
    mapped: u64,
    /// Whether ranges of whole mappings can be given back and mapped again or elsewhere
    /// (`vmm/holes.rs`): the gaps between mappings are then holes.
    holes: bool,
}

/// The allocation properties of the segment's memory: pinned device memory on `device`.
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
    pub(crate) fn reserve(
        device: sys::CUdevice,
        reserve: u64,
        chunk: u64,
        holes: bool,
    ) -> Result<Self> {
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
            mappings: BTreeMap::new(),
            mapped: 0,
            holes,
        })
    }

    /// Device address of the range's start.
    pub(crate) fn base(&self) -> sys::CUdeviceptr {
        self.base
    }

    /// Bytes currently mapped (usable).
    pub(crate) fn mapped(&self) -> u64 {
        self.mapped
    }

    /// Bytes of address space reserved: the most the segment can grow to.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Maps one physical allocation at the end so that at least `target` bytes (rounded up to
    /// the chunk) are usable. Leaves the segment unchanged when the driver refuses.
    ///
    /// # Errors
    /// [`Error::TooLarge`] beyond the reserved range; [`Error::OutOfMemory`] when the driver has
    /// no physical memory for the growth (`reserved` in its report is the mapped size).
    pub(crate) fn grow_to(&mut self, target: u64, budget: Option<u64>) -> Result<()> {
        let add = grow_plan(self.mapped, target, self.chunk, self.reserved)?;
        if add == 0 {
            return Ok(());
        }
        let at = self.mapped;
        self.map_unit(at, add, budget)?;
        self.mapped += add;
        Ok(())
    }

    /// Backs `[offset, offset + bytes)` (unmapped, inside the reservation) with one new
    /// physical allocation, mapped with access: one unit. Leaves the segment unchanged when the
    /// driver refuses.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the driver has no physical memory; a mapped driver error.
    fn map_unit(&mut self, offset: u64, bytes: u64, budget: Option<u64>) -> Result<()> {
        let handle = self.map_new(offset, bytes, budget)?;
        if let Err(e) = self.set_access(offset, bytes) {
            self.undo(offset, bytes, handle);
            return Err(e);
        }
        self.mappings.insert(
            offset,
            Mapping {
                handle,
                size: bytes,
            },
        );
        Ok(())
    }

    /// Creates a physical allocation of `bytes` and maps it at `offset` (unmapped, inside the
    /// reservation); access is set by the caller. Undoes itself on failure.
    fn map_new(
        &self,
        offset: u64,
        bytes: u64,
        budget: Option<u64>,
    ) -> Result<sys::CUmemGenericAllocationHandle> {
        let size = to_usize(bytes, "expandable growth")?;
        let prop = chunk_prop(self.device);
        let oom = |api: &'static str, e| {
            map_alloc_err(api, e, MemoryKind::DeviceLocal, bytes, self.mapped, budget)
        };
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and properties; `size` is a multiple of the chunk, itself a
        // multiple of the granularity; flags must be 0.
        unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }
            .result()
            .map_err(|e| oom("cuMemCreate", e))?;
        // SAFETY: `base + offset .. + size` lies inside the reserved range and is unmapped (the
        // callers map past the extent or into holes); `handle` is a fresh allocation of `size`.
        if let Err(e) = unsafe { sys::cuMemMap(self.base + offset, size, 0, handle, 0) }.result() {
            // SAFETY: the allocation is mapped nowhere.
            unsafe {
                let _ = sys::cuMemRelease(handle);
            }
            return Err(oom("cuMemMap", e));
        }
        Ok(handle)
    }

    /// Gives `base + offset .. + bytes` (mapped) read-write access for the device.
    fn set_access(&self, offset: u64, bytes: u64) -> Result<()> {
        let access = sys::CUmemAccessDesc {
            location: chunk_prop(self.device).location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let size = to_usize(bytes, "expandable access")?;
        // SAFETY: the range is fully mapped (the callers just mapped it); one descriptor.
        unsafe { sys::cuMemSetAccess(self.base + offset, size, &access, 1) }
            .result()
            .map_err(|e| map_driver_err("cuMemSetAccess", e))
    }

    /// Unmaps and releases `handle`, mapped at `offset` for `bytes` (undoing a failed growth or
    /// commit).
    fn undo(&self, offset: u64, bytes: u64, handle: sys::CUmemGenericAllocationHandle) {
        let Ok(size) = to_usize(bytes, "expandable undo") else {
            return;
        };
        // SAFETY: the handle was mapped there by this call's earlier step and no work has used
        // it yet.
        unsafe {
            let _ = sys::cuMemUnmap(self.base + offset, size);
            let _ = sys::cuMemRelease(handle);
        }
    }

    /// Unmaps the mappings past the new end: `target` rounded up to the chunk, or the end of
    /// the mapping that holds it (a mapping is returned whole or not at all; see the module
    /// doc).
    ///
    /// The caller guarantees that no in-flight work touches the bytes past `target` (it waits
    /// for their tickets first, as for `free_block`).
    ///
    /// # Errors
    /// A mapped driver error; mappings already unmapped stay unmapped (the extent then ends
    /// after the last one left).
    pub(crate) fn shrink_to(&mut self, target: u64) -> Result<()> {
        let units: Vec<(u64, u64)> = self.mappings.iter().map(|(o, m)| (*o, m.size)).collect();
        let end = shrink_end(&units, target, self.chunk, self.mapped)?;
        while let Some((&offset, &Mapping { handle, size })) = self.mappings.last_key_value() {
            if offset < end {
                break;
            }
            if let Err(e) = self.unmap(offset, size, handle, true) {
                self.mapped = offset + size;
                return Err(e);
            }
            self.mappings.pop_last();
        }
        self.mapped = end;
        Ok(())
    }

    /// Unmaps `handle` from `base + offset .. + size` (exactly how it was mapped; no work uses
    /// it, the caller's guarantee) and releases it when `release`.
    fn unmap(
        &self,
        offset: u64,
        size: u64,
        handle: sys::CUmemGenericAllocationHandle,
        release: bool,
    ) -> Result<()> {
        // SAFETY: as documented above.
        unsafe { sys::cuMemUnmap(self.base + offset, to_usize(size, "expandable mapping")?) }
            .result()
            .map_err(|e| map_driver_err("cuMemUnmap", e))?;
        if release {
            // SAFETY: the handle is no longer mapped anywhere.
            unsafe { sys::cuMemRelease(handle) }
                .result()
                .map_err(|e| map_driver_err("cuMemRelease", e))?;
        }
        Ok(())
    }

    /// Unmaps and releases every mapping and frees the address range.
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

mod holes;

#[cfg(test)]
mod tests;
