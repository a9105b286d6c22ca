//! [`DeviceInfo`]: the facts the backend reads about its device once, at startup (name, compute
//! capability, memory, unified addressing). Separate from the block and copy paths, which only
//! read the result.

use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};
use tensormem_contract::{DeviceType, Error, Result};

use crate::error::{BACKEND, map_driver_err, map_init_err};

/// What the backend reads about its device once.
#[derive(Debug)]
pub(crate) struct DeviceInfo {
    pub name: String,
    /// Discrete, or integrated (`CU_DEVICE_ATTRIBUTE_INTEGRATED`: Jetson, GH200's coherent parts).
    pub device_type: DeviceType,
    pub compute: (i32, i32),
    /// Device memory in bytes.
    pub total: u64,
    /// Free device memory at startup (`cuMemGetInfo`), the budget.
    pub free: u64,
}

impl DeviceInfo {
    /// Queries name, compute capability, memory and unified addressing.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without unified addressing; mapped driver errors.
    pub(crate) fn query(ctx: &Arc<CudaContext>) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(|e| map_init_err("cuCtxSetCurrent", e))?;
        let uva = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
            .map_err(|e| map_driver_err("cuDeviceGetAttribute", e))?;
        if uva == 0 {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "a device without unified addressing (pinned host blocks are addressed \
                       through it)"
                    .into(),
            });
        }
        let name = ctx
            .name()
            .map_err(|e| map_driver_err("cuDeviceGetName", e))?;
        let compute = ctx
            .compute_capability()
            .map_err(|e| map_driver_err("cuDeviceGetAttribute", e))?;
        let (free, total) = ctx
            .mem_get_info()
            .map_err(|e| map_driver_err("cuMemGetInfo", e))?;
        let integrated = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED)
            .map_err(|e| map_driver_err("cuDeviceGetAttribute", e))?;
        Ok(DeviceInfo {
            name,
            device_type: if integrated != 0 {
                DeviceType::IntegratedGpu
            } else {
                DeviceType::DiscreteGpu
            },
            compute,
            total: total as u64,
            free: free as u64,
        })
    }
}
