use tensormem_contract::Error;

use super::*;

fn never() -> Result<bool> {
    panic!("peer access was asked for one device")
}

#[test]
fn one_context_copies_device_to_device() {
    let r = choose_route(true, true, never).unwrap();
    assert_eq!(r, Some(Route::SameContext));
    assert_eq!(r.unwrap().path(), PeerPath::SharedDevice);
}

#[test]
fn one_device_in_two_contexts_needs_no_peer_access() {
    let r = choose_route(false, true, never).unwrap();
    assert_eq!(r, Some(Route::SameDevice));
    assert_eq!(r.unwrap().path(), PeerPath::SharedDevice);
}

#[test]
fn two_devices_copy_peer_to_peer_only_with_access() {
    let r = choose_route(false, false, || Ok(true)).unwrap();
    assert_eq!(r, Some(Route::Peer));
    assert_eq!(r.unwrap().path(), PeerPath::PeerToPeer);
    assert_eq!(choose_route(false, false, || Ok(false)).unwrap(), None);
}

#[test]
fn a_failed_peer_query_is_an_error_not_a_route() {
    let failed = choose_route(false, false, || {
        Err(Error::Backend {
            backend: "cuda",
            api: "cuDeviceCanAccessPeer",
            code: 1,
            message: "failed".into(),
        })
    });
    assert!(matches!(failed, Err(Error::Backend { .. })));
}
