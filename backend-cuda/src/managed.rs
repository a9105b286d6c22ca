//! Managed (unified) memory: `cuMemAllocManaged` blocks, advised to live on the device, moved
//! ahead of use with `cuMemPrefetchAsync` on the backend's stream.
//!
//! * **Allocation** attaches globally (any stream may use it) and advises the device as the
//!   preferred location and as an accessor (`cuMemAdvise`), so pages stay on the device once
//!   there and the device maps host-resident pages instead of faulting them over one by one.
//! * **Never oversubscribe.** Managed memory may be oversubscribed on Linux, but asking for more
//!   than the device has free makes the GPU thrash (or hang, in the worst case) instead of
//!   failing. A request is checked against `cuMemGetInfo`'s free bytes less [`HEADROOM`] (left
//!   to the driver for launches and the kernels' module) *before* the driver is called, and a
//!   request that does not fit is [`Error::OutOfMemory`], the pools' retry path.
//! * **Prefetch** ([`tensormem_contract::Managed::prefetch`]) enqueues `cuMemPrefetchAsync` to the
//!   device or the host on the stream: in order after earlier kernels on the range and before
//!   later ones, with a ticket like any submission.
//! * Offered only on devices with concurrent managed access (`Migrating`; every Linux GPU since
//!   Pascal): without it the host may not touch managed memory while *any* kernel runs, which
//!   the contract's per-range rule cannot promise. Elsewhere the kind is `Unsupported`.

use cudarc::driver::{CudaContext, result, sys};
use tensormem_contract::{Error, ManagedMemory, MemoryKind, OomReport, Residence, Result};

use crate::blocks::Memory;
use crate::error::{BACKEND, map_alloc_err, map_driver_err};

/// Free device memory a managed allocation leaves untouched (module doc): 64 MiB, room for the
/// driver's own launch and module memory.
pub(crate) const HEADROOM: u64 = 64 << 20;

/// What the device offers, from its attributes: `Migrating` with both managed memory and
/// concurrent managed access, else `Unsupported`.
pub(crate) fn support(managed: bool, concurrent: bool) -> ManagedMemory {
    if managed && concurrent {
        ManagedMemory::Migrating
    } else {
        ManagedMemory::Unsupported
    }
}

/// Reads [`support`]'s inputs from the device.
///
/// # Errors
/// A mapped driver error (`cuDeviceGetAttribute`).
pub(crate) fn query_support(ctx: &CudaContext) -> Result<ManagedMemory> {
    let attr = |a| {
        ctx.attribute(a)
            .map_err(|e| map_driver_err("cuDeviceGetAttribute", e))
    };
    let managed = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?;
    let concurrent = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?;
    Ok(support(managed != 0, concurrent != 0))
}

/// Refuses a managed request of `size` bytes that does not fit in `free` bytes of device
/// memory less [`HEADROOM`]; `reserved` is the backend's live managed bytes, for the report.
///
/// # Errors
/// [`Error::OutOfMemory`] naming `cuMemGetInfo` and the bytes that fit.
pub(crate) fn check_fits(size: u64, free: u64, reserved: u64) -> Result<()> {
    let fits = free.saturating_sub(HEADROOM);
    if size <= fits {
        return Ok(());
    }
    Err(Error::OutOfMemory(Box::new(OomReport {
        pool: format!(
            "cuda managed (refused before cuMemAllocManaged: cuMemGetInfo reports {free} bytes \
             free, {HEADROOM} kept for the driver; managed memory is never oversubscribed)"
        ),
        requested: size,
        reserved,
        budget: Some(fits),
        ..OomReport::default()
    })))
}

/// The `CUmemLocation` of `to`: the device `device`, or the host.
pub(crate) fn location(to: Residence, device: sys::CUdevice) -> sys::CUmemLocation {
    match to {
        Residence::Device => sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        Residence::Host => sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
    }
}

/// Allocates `size` bytes of managed memory on the current context's device `device`, after
/// [`check_fits`] against `cuMemGetInfo`, and advises it onto the device.
///
/// # Errors
/// [`Error::OutOfMemory`] when it does not fit or the driver is out of memory; other mapped
/// driver errors, naming the call. Nothing stays allocated on an error.
pub(crate) fn alloc(size: u64, device: sys::CUdevice, reserved: u64) -> Result<Memory> {
    let bytes = crate::conv::to_usize(size, "managed block")?;
    let (free, _) = result::mem_get_info().map_err(|e| map_driver_err("cuMemGetInfo", e))?;
    check_fits(size, free as u64, reserved)?;
    // SAFETY: plain allocation; the caller made the context current. Contents are
    // uninitialised bytes, which the backend never reads as anything but bytes.
    let ptr =
        unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .map_err(|e| {
                map_alloc_err(
                    "cuMemAllocManaged",
                    e,
                    MemoryKind::Managed,
                    size,
                    reserved,
                    Some(free as u64),
                )
            })?;
    let here = location(Residence::Device, device);
    let advised = [
        sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        sys::CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY,
    ]
    .into_iter()
    .try_for_each(|advice| {
        // SAFETY: the range is the allocation just made.
        unsafe { sys::cuMemAdvise_v2(ptr, bytes, advice, here) }
            .result()
            .map_err(|e| map_driver_err("cuMemAdvise", e))
    });
    if let Err(e) = advised {
        // SAFETY: the allocation is unused; freed once.
        let _ = unsafe { result::free_sync(ptr) };
        return Err(e);
    }
    Ok(Memory::Managed { ptr })
}

/// Enqueues moving `bytes` at `addr` to `to` on `stream`.
///
/// # Safety
/// The range lies inside a live managed block.
pub(crate) unsafe fn prefetch(
    addr: sys::CUdeviceptr,
    bytes: usize,
    to: Residence,
    device: sys::CUdevice,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: the caller guarantees the range; the stream is live.
    unsafe { sys::cuMemPrefetchAsync_v2(addr, bytes, location(to, device), 0, stream) }
        .result()
        .map_err(|e| map_driver_err("cuMemPrefetchAsync", e))
}

/// Refuses managed blocks on a device without them (a direct caller; the front refuses first).
///
/// # Errors
/// [`Error::Unsupported`].
pub(crate) fn check_supported(support: ManagedMemory) -> Result<()> {
    if support.supported() {
        return Ok(());
    }
    Err(Error::Unsupported {
        backend: BACKEND,
        what: "managed memory on a device without concurrent managed access".into(),
    })
}

#[cfg(test)]
mod tests;
