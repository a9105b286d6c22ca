//! Checks that the CUDA libraries can be loaded *before* any cudarc call.
//!
//! cudarc opens `libcuda` and `libnvrtc` with `dlopen` on first use and **panics** when they are
//! missing (`toolchain.md`, pitfall 1). Every constructor calls [`check_libraries`] first, so a
//! machine without the NVIDIA driver or NVRTC gets [`Error::BackendUnavailable`] with a reason
//! the user can act on, and test binaries keep running.

use tensormem::{Error, Result};

use crate::error::BACKEND;

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
            "libnvrtc.so (CUDA's runtime compiler, needed to build the kernels) was not found: \
             install the CUDA toolkit's NVRTC (or the nvidia-cuda-nvrtc-cu12 wheel) and add its \
             lib directory to LD_LIBRARY_PATH"
                .to_string(),
        ),
    }
}

/// Fails unless both `libcuda` and `libnvrtc` load.
///
/// # Errors
/// [`Error::BackendUnavailable`] naming the missing library.
pub fn check_libraries() -> Result<()> {
    match missing_reason(driver_present(), nvrtc_present()) {
        None => Ok(()),
        Some(reason) => Err(Error::BackendUnavailable {
            backend: BACKEND,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests;
