//! Maps CUDA driver and NVRTC failures into the one [`tensormem_contract::Error`].
//!
//! Every mapper is named after what it maps and keeps the native code (style guide 4). The rules:
//!
//! * `CUDA_ERROR_OUT_OF_MEMORY` from an allocation → [`Error::OutOfMemory`], so the core pools run
//!   their OOM path (wait for pending frees, trim, retry); it is the only retryable failure.
//! * Sticky errors that poison the context (illegal address, launch failure, ECC, assert, unknown,
//!   …) → [`Error::DeviceLost`]: the CUDA context must be recreated, as the driver documents.
//!   `health.rs` remembers the first one so every later call fails fast.
//! * `CUDA_ERROR_NOT_SUPPORTED` → [`Error::Unsupported`].
//! * Failures while creating the backend that mean "no usable CUDA here" (no device, a driver
//!   older than the pinned API, a stub library) → [`Error::BackendUnavailable`].
//! * Everything else → [`Error::Backend`] with the API name and the raw `CUresult`.
//!
//! The message is the `CUresult` name (`CUDA_ERROR_INVALID_VALUE`), taken from the enum, not from
//! `cuGetErrorString`: formatting an error never calls the driver (cudarc's `Debug` for
//! `DriverError` does, and would panic when libcuda is absent).

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use tensormem_contract::{Error, MemoryKind, OomReport};

/// Backend name used in every error.
pub(crate) const BACKEND: &str = "cuda";

/// Whether `code` is a sticky error after which the context is unusable.
pub(crate) fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_NVLINK_UNCORRECTABLE
            | CUresult::CUDA_ERROR_DEINITIALIZED
            // Unattributed failures (e.g. an Xid the driver cannot map) leave the context in an
            // unknown state; treated as lost, as PyTorch does.
            | CUresult::CUDA_ERROR_UNKNOWN
    )
}

/// Maps a failed driver call that is not an allocation: sticky errors → `DeviceLost`,
/// `NOT_SUPPORTED` → `Unsupported`, the rest → `Backend { api, code }`.
pub(crate) fn map_driver_err(api: &'static str, err: DriverError) -> Error {
    let code = err.0;
    if is_sticky(code) {
        return Error::DeviceLost {
            backend: BACKEND,
            detail: format!("{api} returned {code:?}; the CUDA context must be recreated"),
        };
    }
    if code == CUresult::CUDA_ERROR_NOT_SUPPORTED {
        return Error::Unsupported {
            backend: BACKEND,
            what: format!("{api} ({code:?})"),
        };
    }
    Error::Backend {
        backend: BACKEND,
        api,
        code: code as i64,
        message: format!("{code:?}"),
    }
}

/// Maps a failed allocation of `requested` bytes of `kind`: `OUT_OF_MEMORY` → `OutOfMemory` with
/// what the backend knows (its own live block bytes of that kind as `reserved`, the budget);
/// anything else as [`map_driver_err`].
pub(crate) fn map_alloc_err(
    api: &'static str,
    err: DriverError,
    kind: MemoryKind,
    requested: u64,
    reserved: u64,
    budget: Option<u64>,
) -> Error {
    if err.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return Error::OutOfMemory(Box::new(OomReport {
            pool: format!("cuda {} ({api})", kind.name()),
            requested,
            reserved,
            budget,
            ..OomReport::default()
        }));
    }
    map_driver_err(api, err)
}

/// Maps a failure while creating the backend: codes meaning "no usable CUDA here" become
/// [`Error::BackendUnavailable`] with a reason a user can act on; the rest as [`map_driver_err`].
pub(crate) fn map_init_err(api: &'static str, err: DriverError) -> Error {
    let code = err.0;
    let reason = match code {
        CUresult::CUDA_ERROR_NO_DEVICE => "no CUDA-capable device is visible (check \
             CUDA_VISIBLE_DEVICES and that the NVIDIA kernel driver is loaded)"
            .to_string(),
        CUresult::CUDA_ERROR_INVALID_DEVICE => {
            "the requested device ordinal does not exist".to_string()
        }
        CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => "the NVIDIA user-space driver \
             (libcuda) does not match the kernel module; reinstall or reboot"
            .to_string(),
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => "the device is busy or unavailable \
             (exclusive-process compute mode, or a MIG instance this process may not use)"
            .to_string(),
        CUresult::CUDA_ERROR_STUB_LIBRARY => "libcuda.so is the toolkit's stub library, not a \
             real driver; fix LD_LIBRARY_PATH"
            .to_string(),
        CUresult::CUDA_ERROR_DEVICE_NOT_LICENSED
        | CUresult::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | CUresult::CUDA_ERROR_SYSTEM_NOT_READY
        | CUresult::CUDA_ERROR_OPERATING_SYSTEM
        | CUresult::CUDA_ERROR_NOT_INITIALIZED => {
            format!("the driver refused to initialise ({code:?})")
        }
        _ => return map_driver_err(api, err),
    };
    Error::BackendUnavailable {
        backend: BACKEND,
        reason: format!("{api}: {reason}"),
    }
}

#[cfg(test)]
mod tests;
