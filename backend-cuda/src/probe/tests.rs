use super::*;

#[test]
fn reasons_name_the_missing_library() {
    assert_eq!(missing_reason(true, true), None);
    assert!(missing_reason(false, true).unwrap().contains("libcuda"));
    assert!(missing_reason(false, false).unwrap().contains("libcuda"));
    assert!(missing_reason(true, false).unwrap().contains("libnvrtc"));
}

#[test]
fn check_agrees_with_the_probes_and_does_not_panic() {
    let present = driver_present() && nvrtc_present();
    match check_libraries() {
        Ok(()) => assert!(present),
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "cuda");
            if present {
                // Both libraries load, so the driver is older than the build's CUDA.
                assert!(reason.contains("cuda-13000"), "{reason}");
            } else {
                assert!(reason.contains(".so"), "{reason}");
            }
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}
