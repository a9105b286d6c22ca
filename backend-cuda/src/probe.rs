//! Checks that the CUDA libraries can be loaded *before* any cudarc call.
//!
//! cudarc opens `libcuda` and `libnvrtc` with `dlopen` on first use and **panics** when they are
//! missing (`toolchain.md`, pitfall 1). Every constructor calls [`check_libraries`] first, so a
//! machine without the NVIDIA driver or NVRTC gets [`Error::BackendUnavailable`] with a reason
//! the user can act on, and test binaries keep running.

use std::ffi::c_int;

use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, map_init_err};
use crate::toolchain::{self, CudaVersion};

/// Whether `libcuda` (the driver) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only dlopens the candidate library names (running their initialisers, which is
    // what loading the NVIDIA driver requires anyway) and closes them again; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether `libnvrtc` (the runtime compiler, shipped with the CUDA toolkit) can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: as in `driver_present`.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The reason the backend cannot start, from which libraries are present.
pub(crate) fn missing_reason(driver: bool, nvrtc: bool) -> Option<String> {
    match (driver, nvrtc) {
        (true, true) => None,
        (false, _) => Some(
            "libcuda.so (the NVIDIA driver) was not found: no NVIDIA GPU driver is installed \
             on this machine, or it is not on the loader path"
                .to_string(),
        ),
        (true, false) => Some(
            "libnvrtc (CUDA's runtime compiler, needed to build the kernels) was not found \
             (searched libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12, ... on the loader path): \
             install the CUDA toolkit's NVRTC or the nvidia-cuda-nvrtc wheel (CUDA 13: \
             nvidia/cu13/lib/libnvrtc.so.13) and add its lib directory to LD_LIBRARY_PATH"
                .to_string(),
        ),
    }
}

/// The CUDA version the driver supports (`cuDriverGetVersion`, which needs no `cuInit`).
/// Call only after [`driver_present`].
///
/// # Errors
/// A mapped driver error.
pub fn driver_version() -> Result<CudaVersion> {
    let mut v: c_int = 0;
    // SAFETY: libcuda is loaded (checked by the caller); `v` is valid for writes.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(|e| map_init_err("cuDriverGetVersion", e))?;
    Ok(CudaVersion::from_driver_int(v))
}

/// Fails unless both `libcuda` and `libnvrtc` load and the driver supports the CUDA version the
/// build targets ([`toolchain::BUILD_CUDA`]): past this check no cudarc call can panic on a
/// missing library or a missing driver symbol.
///
/// # Errors
/// [`Error::BackendUnavailable`] naming the missing library or both versions.
pub fn check_libraries() -> Result<()> {
    match missing_reason(driver_present(), nvrtc_present()) {
        None => toolchain::check_driver(driver_version()?),
        Some(reason) => Err(Error::BackendUnavailable {
            backend: BACKEND,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests;
