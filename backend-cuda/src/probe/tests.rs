#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

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
            assert!(!present);
            assert_eq!(backend, "cuda");
            assert!(reason.contains(".so"));
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}
