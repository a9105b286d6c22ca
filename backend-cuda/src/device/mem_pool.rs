//! [`MemPool`]: the private stream-ordered memory pool behind [`DeviceAlloc::StreamOrdered`]
//! (`cuMemPoolCreate` with an unlimited release threshold), its trim and its destruction. Separate
//! because it owns a driver object with its own `unsafe` lifetime rules.
//!
//! [`DeviceAlloc::StreamOrdered`]: crate::DeviceAlloc::StreamOrdered

use std::ptr;
use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};
use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, map_driver_err};

/// A private stream-ordered memory pool (`cuMemPoolCreate`) that keeps freed memory.
#[derive(Debug)]
pub(crate) struct MemPool {
    pub(super) pool: sys::CUmemoryPool,
}

// SAFETY: a CUmemoryPool handle may be used from any thread; the driver synchronises pool calls.
unsafe impl Send for MemPool {}
// SAFETY: as above; the handle is never mutated after creation.
unsafe impl Sync for MemPool {}

impl MemPool {
    /// Creates a pool on the context's device with an unlimited release threshold.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the device has no memory pools; mapped driver errors.
    pub(crate) fn create(ctx: &Arc<CudaContext>) -> Result<Self> {
        if !ctx.has_async_alloc() {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "DeviceAlloc::StreamOrdered on a device without memory pools".into(),
            });
        }
        let props = sys::CUmemPoolProps {
            allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.cu_device(),
            },
            win32SecurityAttributes: ptr::null_mut(),
            maxSize: 0,
            // CUDA 13 layout (the cudarc pin): no usage hints.
            usage: 0,
            reserved: [0; 54],
        };
        // SAFETY: `props` is fully initialised; the context is current (DeviceInfo::query).
        let pool = unsafe { result::mem_pool::create(&props) }
            .map_err(|e| map_driver_err("cuMemPoolCreate", e))?;
        let mut threshold: u64 = u64::MAX;
        // SAFETY: RELEASE_THRESHOLD takes a cuuint64_t; `threshold` lives across the call.
        let set = unsafe {
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
        };
        let pool = MemPool { pool };
        set.map_err(|e| map_driver_err("cuMemPoolSetAttribute", e))?;
        Ok(pool)
    }

    /// Returns cached memory above `keep` bytes to the device.
    pub(crate) fn trim_to(&self, keep: usize) -> Result<()> {
        // SAFETY: the pool is live; trimming only releases unused memory.
        unsafe { result::mem_pool::trim_to(self.pool, keep) }
            .map_err(|e| map_driver_err("cuMemPoolTrimTo", e))
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        // SAFETY: the backend drops the pool after freeing its blocks and syncing its stream.
        let _ = unsafe { result::mem_pool::destroy(self.pool) };
    }
}
