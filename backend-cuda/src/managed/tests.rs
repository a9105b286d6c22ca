use super::*;

#[test]
fn only_concurrent_managed_access_is_offered() {
    assert_eq!(support(true, true), ManagedMemory::Migrating);
    assert_eq!(support(true, false), ManagedMemory::Unsupported);
    assert_eq!(support(false, true), ManagedMemory::Unsupported);
    assert!(check_supported(ManagedMemory::Migrating).is_ok());
    assert!(matches!(
        check_supported(ManagedMemory::Unsupported),
        Err(Error::Unsupported {
            backend: "cuda",
            ..
        })
    ));
}

#[test]
fn a_request_fits_only_below_free_memory_less_headroom() {
    let free = 1 << 30;
    assert!(check_fits(free - HEADROOM, free, 0).is_ok());
    assert!(check_fits(1, free, 0).is_ok());
    match check_fits(free - HEADROOM + 1, free, 5) {
        Err(Error::OutOfMemory(r)) => {
            assert_eq!(r.requested, free - HEADROOM + 1);
            assert_eq!(r.reserved, 5);
            assert_eq!(r.budget, Some(free - HEADROOM));
            assert!(r.pool.contains("cuMemGetInfo"), "{}", r.pool);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn oversubscription_is_refused_even_with_little_free_memory() {
    // Less free than the headroom: nothing fits, and nothing underflows.
    assert!(matches!(
        check_fits(1, HEADROOM / 2, 0),
        Err(Error::OutOfMemory(_))
    ));
    assert!(matches!(
        check_fits(u64::MAX, u64::MAX / 2, 0),
        Err(Error::OutOfMemory(_))
    ));
}

#[test]
fn locations_name_the_device_or_the_host() {
    let d = location(Residence::Device, 3);
    assert_eq!(d.type_, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE);
    assert_eq!(d.id, 3);
    let h = location(Residence::Host, 3);
    assert_eq!(h.type_, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST);
}
