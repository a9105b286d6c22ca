//! NUMA-local pinned host memory: the node closest to the device, and pinned blocks bound to it.
//!
//! **The node.** `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID` (CUDA 12.2+ drivers; -1 where the system has
//! no NUMA); where the driver does not know the attribute, the device's PCI address
//! (`CU_DEVICE_ATTRIBUTE_PCI_{DOMAIN,BUS,DEVICE}_ID`) looked up in sysfs; the same where the
//! attribute answers -1 (not known). Core's [`tensormem_host::numa::detect_device_placement`] turns
//! it into a [`HostPlacement`]: bound only on a machine with several nodes, and unbound with the
//! reason everywhere else (one node, `numa_node` = -1, no sysfs).
//!
//! **The blocks.** `cuMemHostAlloc` takes no node and the driver faults its pages in itself, so
//! a bound backend allocates its pinned blocks the way PyTorch's `pinned_use_cuda_host_register`
//! does: `mmap`, `mbind` to the node before any page exists, then `cuMemHostRegister` (which pins
//! the pages, faulting them in under that policy). Under unified addressing the registered host
//! pointer is also the device address when the device reports
//! `CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM`; without it the backend stays
//! unbound. The trade: registered memory is cached, never write-combined, so `Upload` blocks
//! lose write-combining on this path (PyTorch's pinned memory is not write-combined either);
//! locality wins for the bandwidth of every transfer.

use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};
use tensormem_contract::HostPlacement;

/// Where this device's pinned blocks go (see the module doc). Never an error: a node the driver
/// does not know (-1, or a driver without the attribute) falls back to the PCI address, and no
/// node at all, one node, or a device that cannot use registered memory is unbound with the
/// reason.
pub(crate) fn host_placement(ctx: &Arc<CudaContext>) -> HostPlacement {
    use sys::CUdevice_attribute as A;
    let attr = |a| ctx.attribute(a).ok();
    let driver_node =
        attr(A::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID).map(|id| (i64::from(id), "CUDA host NUMA id"));
    let bdf = match (
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ) {
        (Some(domain), Some(bus), Some(device)) => {
            Some(format!("{domain:04x}:{bus:02x}:{device:02x}.0"))
        }
        _ => None,
    };
    let placement = tensormem_host::numa::detect_device_placement(driver_node, bdf.as_deref());
    if placement.bound_node().is_some()
        && attr(A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM) != Some(1)
    {
        return HostPlacement::unbound(
            "the device cannot address registered host memory by its host pointer",
        );
    }
    placement
}

/// Pinned host memory of `size` bytes on NUMA `node`: mapped, bound before first touch, then
/// registered with the driver. Returns the pointer and the mapped length (whole pages).
///
/// # Errors
/// `CUDA_ERROR_OUT_OF_MEMORY` when the mapping fails for lack of memory,
/// `CUDA_ERROR_OPERATING_SYSTEM` when `mbind` refuses, or the driver's error from
/// `cuMemHostRegister` (the mapping is released on every error).
#[cfg(target_os = "linux")]
pub(crate) fn alloc_registered(
    size: usize,
    node: u32,
) -> std::result::Result<(std::ptr::NonNull<u8>, usize), cudarc::driver::result::DriverError> {
    use cudarc::driver::result::DriverError;
    let os_err = |e: std::io::Error| {
        DriverError(match e.raw_os_error() {
            Some(libc::ENOMEM) => sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            _ => sys::CUresult::CUDA_ERROR_OPERATING_SYSTEM,
        })
    };
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let len = size
        .checked_next_multiple_of(page)
        .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
    // SAFETY: a fresh private anonymous mapping at an address the kernel chooses; checked below.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(os_err(std::io::Error::last_os_error()));
    }
    let unmap = || {
        // SAFETY: exactly the mapping made above, not referenced after this error path.
        unsafe { libc::munmap(raw, len) };
    };
    // SAFETY: our own fresh, page-aligned mapping of `len` bytes; no page of it exists yet.
    if let Err(e) = unsafe { tensormem_host::numa::kernel::bind_preferred(raw.cast(), len, node) } {
        unmap();
        return Err(os_err(e));
    }
    let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: the range is a live mapping owned by this function; the caller made the context
    // current. Registration pins (and faults in, under the policy set above) every page.
    if let Err(e) = unsafe { sys::cuMemHostRegister_v2(raw, len, flags) }.result() {
        unmap();
        return Err(e);
    }
    match std::ptr::NonNull::new(raw.cast::<u8>()) {
        Some(ptr) => Ok((ptr, len)),
        None => Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
    }
}

/// Unregisters and unmaps memory from [`alloc_registered`].
///
/// # Safety
/// `ptr` and `len` came from one [`alloc_registered`] call, no work uses the memory any more, and
/// it is not used afterwards.
#[cfg(target_os = "linux")]
pub(crate) unsafe fn free_registered(
    ptr: std::ptr::NonNull<u8>,
    len: usize,
) -> std::result::Result<(), cudarc::driver::result::DriverError> {
    // SAFETY: the range was registered by `alloc_registered` and is unregistered once.
    let unregistered = unsafe { sys::cuMemHostUnregister(ptr.as_ptr().cast()) }.result();
    // SAFETY: exactly the mapping `alloc_registered` made; unmapped even if unregistering failed
    // (a lost context has dropped its registrations).
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    unregistered
}
