use super::*;

fn e(code: CUresult) -> DriverError {
    DriverError(code)
}

#[test]
fn allocation_oom_is_the_retryable_core_oom() {
    let err = map_alloc_err(
        "cuMemAlloc",
        e(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        MemoryKind::DeviceLocal,
        1 << 30,
        3 << 30,
        Some(4 << 30),
    );
    assert!(err.is_retryable());
    let Error::OutOfMemory(report) = err else {
        panic!("expected OutOfMemory, got {err:?}");
    };
    assert_eq!(report.requested, 1 << 30);
    assert_eq!(report.reserved, 3 << 30);
    assert_eq!(report.budget, Some(4 << 30));
    assert!(report.pool.contains("device-local"));
    assert!(report.pool.contains("cuMemAlloc"));
}

#[test]
fn other_allocation_failures_keep_the_code() {
    let err = map_alloc_err(
        "cuMemHostAlloc",
        e(CUresult::CUDA_ERROR_INVALID_VALUE),
        MemoryKind::Upload,
        64,
        0,
        None,
    );
    assert!(!err.is_retryable());
    assert!(matches!(
        err,
        Error::Backend { api: "cuMemHostAlloc", code: 1, ref message, .. }
            if message == "CUDA_ERROR_INVALID_VALUE"
    ));
}

#[test]
fn sticky_errors_are_device_lost() {
    for code in [
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        CUresult::CUDA_ERROR_ASSERT,
        CUresult::CUDA_ERROR_UNKNOWN,
    ] {
        let err = map_driver_err("cuEventSynchronize", e(code));
        assert!(
            matches!(err, Error::DeviceLost { backend: "cuda", ref detail } if detail.contains("cuEventSynchronize")),
            "{code:?} -> {err:?}"
        );
    }
}

#[test]
fn non_sticky_errors_are_not_device_lost() {
    for code in [
        CUresult::CUDA_ERROR_INVALID_VALUE,
        CUresult::CUDA_ERROR_NOT_READY,
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        CUresult::CUDA_ERROR_INVALID_HANDLE,
    ] {
        assert!(!is_sticky(code), "{code:?}");
    }
}

#[test]
fn not_supported_is_unsupported() {
    let err = map_driver_err("cuMemCreate", e(CUresult::CUDA_ERROR_NOT_SUPPORTED));
    assert!(
        matches!(err, Error::Unsupported { backend: "cuda", ref what } if what.contains("cuMemCreate"))
    );
}

#[test]
fn init_failures_that_mean_no_cuda_are_unavailable() {
    for code in [
        CUresult::CUDA_ERROR_NO_DEVICE,
        CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
        CUresult::CUDA_ERROR_STUB_LIBRARY,
        CUresult::CUDA_ERROR_INVALID_DEVICE,
    ] {
        let err = map_init_err("cuInit", e(code));
        assert!(
            matches!(err, Error::BackendUnavailable { backend: "cuda", ref reason } if reason.starts_with("cuInit: ")),
            "{code:?} -> {err:?}"
        );
    }
    // A failure that is not about availability keeps its code.
    assert!(matches!(
        map_init_err("cuStreamCreate", e(CUresult::CUDA_ERROR_INVALID_VALUE)),
        Error::Backend {
            api: "cuStreamCreate",
            ..
        }
    ));
}
