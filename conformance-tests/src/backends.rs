//! The targets the suite runs on. Each backend adds its configurations here: a few lines each.

use std::sync::Arc;

use tensormem::{Backend, HostBackend, HostConfig, Result};

use crate::Target;

fn host() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig::default())?))
}

fn host_staging() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    })?))
}

fn cuda() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_cuda::CudaBackend::new(
        &tensormem_cuda::CudaDesc::default(),
    )?))
}

fn cuda_stream_ordered() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_cuda::CudaBackend::new(
        &tensormem_cuda::CudaDesc {
            device_alloc: tensormem_cuda::DeviceAlloc::StreamOrdered,
            ..tensormem_cuda::CudaDesc::default()
        },
    )?))
}

/// Every target, in report order.
pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "host",
            backend: "host",
            create: host,
            after_case: None,
        },
        Target {
            name: "host-staging",
            backend: "host",
            create: host_staging,
            after_case: None,
        },
        Target {
            name: "cuda",
            backend: "cuda",
            create: cuda,
            after_case: None,
        },
        Target {
            name: "cuda-async-alloc",
            backend: "cuda",
            create: cuda_stream_ordered,
            after_case: None,
        },
    ]
}
