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

fn wgpu() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_wgpu::WgpuBackend::new(
        tensormem_wgpu::WgpuConfig::staging(false),
    )?))
}

/// wgpu with staging forced: the discrete-GPU path, even on lavapipe's unified memory, with the
/// queued-write path off so every upload goes through core's staging belt (the `wgpu` target
/// covers `queue.write_buffer`).
fn wgpu_staging() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_wgpu::WgpuBackend::new(
        tensormem_wgpu::WgpuConfig {
            queued_write_max: 0,
            ..tensormem_wgpu::WgpuConfig::staging(true)
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
            name: "wgpu",
            backend: "wgpu",
            create: wgpu,
            after_case: None,
        },
        Target {
            name: "wgpu-staging",
            backend: "wgpu",
            create: wgpu_staging,
            after_case: None,
        },
    ]
}
