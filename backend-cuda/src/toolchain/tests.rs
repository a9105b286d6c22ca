use super::*;

const fn v(major: i32, minor: i32) -> CudaVersion {
    CudaVersion { major, minor }
}

/// `nvrtcGetSupportedArchs` of NVRTC 13.0 (Turing and newer).
const NVRTC_13: [i32; 9] = [75, 80, 86, 87, 89, 90, 100, 103, 120];
/// `nvrtcGetSupportedArchs` of NVRTC 12.4.
const NVRTC_12_4: [i32; 14] = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90];

fn tools(driver: CudaVersion, nvrtc: CudaVersion) -> Toolchain {
    Toolchain { driver, nvrtc }
}

#[test]
fn driver_version_integers_decode() {
    assert_eq!(CudaVersion::from_driver_int(13000), v(13, 0));
    assert_eq!(CudaVersion::from_driver_int(12040), v(12, 4));
    assert_eq!(CudaVersion::from_driver_int(12090).to_string(), "12.9");
}

#[test]
fn a_driver_older_than_the_build_is_refused_with_both_versions() {
    assert!(check_driver(v(13, 0)).is_ok());
    assert!(check_driver(v(13, 2)).is_ok());
    let Err(Error::BackendUnavailable { reason, .. }) = check_driver(v(12, 4)) else {
        panic!("a CUDA 12.4 driver must be refused");
    };
    assert!(
        reason.contains("12.4") && reason.contains("13.0"),
        "{reason}"
    );
    assert!(reason.contains("cuda-13000"), "{reason}");
}

#[test]
fn h200_with_the_matching_nvrtc_gets_a_cubin() {
    // The GPU machine: driver 580 (CUDA 13.0), the CUDA 13 wheel's NVRTC, compute 9.0.
    let t = choose_target(tools(v(13, 0), v(13, 0)), &NVRTC_13, (9, 0)).unwrap();
    assert_eq!(t, CodeTarget::Cubin { arch: 90 });
    assert_eq!(t.nvrtc_arch(), "sm_90");
}

#[test]
fn a_newer_minor_nvrtc_still_gets_a_cubin_but_never_ptx() {
    // NVRTC 13.2 on a 13.0 driver: PTX would fail to JIT, a cubin loads (minor compatibility).
    let t = tools(v(13, 0), v(13, 2));
    assert_eq!(
        choose_target(t, &NVRTC_13, (9, 0)).unwrap(),
        CodeTarget::Cubin { arch: 90 }
    );
    // A device newer than NVRTC's table would need PTX: refused, naming both versions.
    let Err(Error::BackendUnavailable { reason, .. }) = choose_target(t, &NVRTC_13, (13, 0)) else {
        panic!("PTX from a newer NVRTC must be refused");
    };
    assert!(
        reason.contains("13.2") && reason.contains("13.0"),
        "{reason}"
    );
}

#[test]
fn a_device_minor_between_entries_uses_the_older_cubin_of_its_major() {
    // 8.7 is in the table; a hypothetical 8.8 runs sm_87 code.
    let t = tools(v(13, 0), v(13, 0));
    assert_eq!(
        choose_target(t, &NVRTC_13, (8, 8)).unwrap(),
        CodeTarget::Cubin { arch: 87 }
    );
    assert_eq!(
        choose_target(t, &NVRTC_12_4, (8, 0)).unwrap(),
        CodeTarget::Cubin { arch: 80 }
    );
}

#[test]
fn a_device_newer_than_nvrtc_gets_ptx_when_the_driver_is_new_enough() {
    // NVRTC 12.4 knows nothing of Blackwell (10.0): PTX compute_90, JIT by a 13.0 driver.
    let t = choose_target(tools(v(13, 0), v(12, 4)), &NVRTC_12_4, (10, 0)).unwrap();
    assert_eq!(t, CodeTarget::Ptx { arch: 90 });
    assert_eq!(t.nvrtc_arch(), "compute_90");
}

#[test]
fn nvrtc_of_a_newer_major_than_the_driver_is_refused() {
    let Err(Error::BackendUnavailable { reason, .. }) =
        choose_target(tools(v(12, 4), v(13, 0)), &NVRTC_13, (9, 0))
    else {
        panic!("NVRTC 13 on a CUDA 12 driver must be refused");
    };
    assert!(
        reason.contains("NVRTC 13.0") && reason.contains("CUDA 12.4"),
        "{reason}"
    );
    assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
}

#[test]
fn a_device_older_than_nvrtc_supports_is_unsupported() {
    // Volta (7.0) with NVRTC 13, which dropped it.
    let Err(Error::Unsupported { what, .. }) =
        choose_target(tools(v(13, 0), v(13, 0)), &NVRTC_13, (7, 0))
    else {
        panic!("compute 7.0 with NVRTC 13 must be unsupported");
    };
    assert!(what.contains("7.0") && what.contains("sm_75"), "{what}");
}

#[test]
fn an_nvrtc_older_than_cuda_12_is_refused_before_any_newer_symbol_is_used() {
    assert!(check_nvrtc(v(12, 0)).is_ok());
    assert!(check_nvrtc(v(13, 0)).is_ok());
    let Err(Error::BackendUnavailable { reason, .. }) = check_nvrtc(v(11, 8)) else {
        panic!("NVRTC 11.8 must be refused");
    };
    assert!(
        reason.contains("11.8") && reason.contains("libnvrtc.so.13"),
        "{reason}"
    );
}
