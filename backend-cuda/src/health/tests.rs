use super::*;

fn device_lost(detail: &str) -> Error {
    Error::DeviceLost {
        backend: BACKEND,
        detail: detail.into(),
    }
}

#[test]
fn a_healthy_device_passes_results_through() {
    let h = Health::default();
    assert!(h.check().is_ok());
    assert_eq!(h.remember_loss(Ok(7)).unwrap(), 7);
    // Ordinary errors are returned and not remembered.
    let err = h
        .remember_loss::<()>(Err(Error::ZeroSize { what: "copy" }))
        .unwrap_err();
    assert!(matches!(err, Error::ZeroSize { .. }));
    assert!(h.check().is_ok() && !h.is_lost());
}

#[test]
fn the_first_sticky_error_is_remembered_and_fails_every_later_call() {
    let h = Health::default();
    let first = h.remember_loss::<()>(Err(device_lost(
        "cuEventQuery returned CUDA_ERROR_ILLEGAL_ADDRESS",
    )));
    assert!(matches!(first, Err(Error::DeviceLost { .. })));
    assert!(h.is_lost());
    for _ in 0..3 {
        let Err(Error::DeviceLost { detail, .. }) = h.check() else {
            panic!("a lost device must stay lost");
        };
        assert!(detail.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{detail}");
    }
    // A later, different sticky error does not replace the first one.
    let _ = h.remember_loss::<()>(Err(device_lost(
        "cuMemFree returned CUDA_ERROR_LAUNCH_FAILED",
    )));
    let Err(Error::DeviceLost { detail, .. }) = h.check() else {
        panic!("still lost");
    };
    assert!(detail.contains("ILLEGAL_ADDRESS"), "{detail}");
}
