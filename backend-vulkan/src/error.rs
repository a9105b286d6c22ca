//! Native Vulkan and gpu-allocator failures mapped into the one [`tensormem_contract::Error`].
//!
//! Each mapper is named after the codes it understands (the wgpu-hal convention). Every mapper
//! keeps the raw `VkResult` code in the error it returns, so nothing the driver said is lost.

use ash::vk;
use tensormem_contract::{Error, OomReport};

/// Backend name used in every error.
pub(crate) const BACKEND: &str = "vulkan";

/// Maps a `VkResult` of `api` into an [`Error`]:
///
/// * `VK_ERROR_DEVICE_LOST` → [`Error::DeviceLost`] (fatal; the backend must be recreated),
/// * `VK_ERROR_OUT_OF_DEVICE_MEMORY` → [`Error::OutOfMemory`] for `requested` bytes (retryable),
/// * everything else, `VK_ERROR_OUT_OF_HOST_MEMORY` included, → [`Error::Backend`] with the raw code.
pub(crate) fn map_vk(api: &'static str, result: vk::Result, requested: u64) -> Error {
    match result {
        vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost {
            backend: BACKEND,
            detail: format!("{api} returned VK_ERROR_DEVICE_LOST ({})", result.as_raw()),
        },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfMemory(Box::new(OomReport {
            pool: format!("vulkan device memory ({api})"),
            requested,
            ..OomReport::default()
        })),
        other => Error::Backend {
            backend: BACKEND,
            api,
            code: i64::from(other.as_raw()),
            message: format!("{other:?}"),
        },
    }
}

/// Shorthand for [`map_vk`] where no byte count is involved.
pub(crate) fn vk_err(api: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| map_vk(api, result, 0)
}

/// Maps a gpu-allocator failure for a request of `requested` bytes of `kind`:
/// `OutOfMemory` → [`Error::OutOfMemory`], everything else → [`Error::Backend`] (code 0: the
/// allocator has no native code of its own).
pub(crate) fn map_alloc(
    err: gpu_allocator::AllocationError,
    requested: u64,
    kind: &str,
    label: &str,
) -> Error {
    match err {
        gpu_allocator::AllocationError::OutOfMemory => Error::OutOfMemory(Box::new(OomReport {
            pool: format!("vulkan {kind} memory"),
            label: (!label.is_empty()).then(|| label.to_owned()),
            requested,
            ..OomReport::default()
        })),
        other => Error::Backend {
            backend: BACKEND,
            api: "gpu_allocator::Allocator::allocate",
            code: 0,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
