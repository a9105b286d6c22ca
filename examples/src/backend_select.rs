//! Choosing a backend at run time: `auto` tries the fastest first (CUDA, Vulkan, wgpu) and falls
//! back to the host backend, which always works.

use std::sync::Arc;

use tensormem::{Backend, Error, HostBackend, HostConfig, Result};

/// Backend names accepted by [`select`].
pub const NAMES: &[&str] = &["auto", "host", "vulkan", "wgpu", "cuda"];

/// Creates the backend `name` (one of [`NAMES`]). For `auto`, prints to stderr why each faster
/// backend was passed over.
///
/// # Errors
/// [`Error::InvalidArgument`] for an unknown name; the backend's own error (usually
/// [`Error::BackendUnavailable`]) when a named backend cannot start.
pub fn select(name: &str) -> Result<Arc<dyn Backend>> {
    match name {
        "host" => Ok(Arc::new(HostBackend::new(HostConfig::default())?)),
        "cuda" => Ok(Arc::new(tensormem_cuda::CudaBackend::new(
            &tensormem_cuda::CudaDesc::default(),
        )?)),
        "vulkan" => Ok(Arc::new(tensormem_vulkan::VulkanBackend::new(
            tensormem_vulkan::VulkanConfig::default(),
        )?)),
        "wgpu" => Ok(Arc::new(tensormem_wgpu::WgpuBackend::new(
            tensormem_wgpu::WgpuConfig::default(),
        )?)),
        "auto" => {
            for candidate in ["cuda", "vulkan", "wgpu"] {
                match select(candidate) {
                    Ok(b) => return Ok(b),
                    Err(e) => eprintln!("tensormem: {candidate} not used: {e}"),
                }
            }
            select("host")
        }
        other => Err(Error::invalid(format!(
            "unknown backend '{other}'; expected one of {}",
            NAMES.join(", ")
        ))),
    }
}
