#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

use super::*;

const MIB: u64 = 1 << 20;

#[test]
fn round_up_to_granularity() {
    assert_eq!(round_up(0, 2 * MIB).ok(), Some(0));
    assert_eq!(round_up(1, 2 * MIB).ok(), Some(2 * MIB));
    assert_eq!(round_up(2 * MIB, 2 * MIB).ok(), Some(2 * MIB));
    assert_eq!(round_up(2 * MIB + 1, 2 * MIB).ok(), Some(4 * MIB));
    // Not a power of two: still a multiple.
    assert_eq!(round_up(10, 3).ok(), Some(12));
    assert!(matches!(
        round_up(1, 0),
        Err(Error::InvalidAlignment { align: 0, .. })
    ));
    assert!(matches!(
        round_up(u64::MAX, 2 * MIB),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn chunk_is_at_least_one_granule() {
    assert_eq!(chunk_size(0, 2 * MIB).ok(), Some(2 * MIB));
    assert_eq!(chunk_size(20 * MIB, 2 * MIB).ok(), Some(20 * MIB));
    assert_eq!(chunk_size(21 * MIB, 2 * MIB).ok(), Some(22 * MIB));
}

#[test]
fn grow_maps_only_the_missing_chunks() {
    let chunk = 2 * MIB;
    assert_eq!(grow_plan(0, 1, chunk, 64 * MIB).ok(), Some(0..1));
    assert_eq!(grow_plan(2, 5 * MIB, chunk, 64 * MIB).ok(), Some(2..3));
    // Already large enough: nothing to map (never shrinks).
    assert_eq!(grow_plan(4, 3 * MIB, chunk, 64 * MIB).ok(), Some(4..4));
    // Exactly the reservation.
    assert_eq!(grow_plan(0, 64 * MIB, chunk, 64 * MIB).ok(), Some(0..32));
    assert!(matches!(
        grow_plan(0, 64 * MIB + 1, chunk, 64 * MIB),
        Err(Error::TooLarge {
            requested,
            limit,
            ..
        }) if requested == 64 * MIB + 1 && limit == 64 * MIB
    ));
}

#[test]
fn shrink_keeps_the_fewest_chunks_that_hold_the_target() {
    let chunk = 2 * MIB;
    assert_eq!(shrink_plan(8, 5 * MIB, chunk), 3..8);
    assert_eq!(shrink_plan(8, 0, chunk), 0..8);
    assert_eq!(shrink_plan(8, 16 * MIB, chunk), 8..8);
    // Growing "shrink" is a no-op.
    assert_eq!(shrink_plan(2, 100 * MIB, chunk), 2..2);
}

#[test]
fn grow_then_shrink_round_trips_in_a_model() {
    // Replays a varying-size workload against the plans and checks the mapped size is always
    // the smallest multiple of the chunk that holds the target.
    let chunk = 2 * MIB;
    let reserved = 256 * MIB;
    let mut mapped = 0u64;
    for target in [3 * MIB, 40 * MIB, 7 * MIB, 256 * MIB, 0, 1, 100 * MIB] {
        if target.div_ceil(chunk) > mapped {
            let p = grow_plan(mapped, target, chunk, reserved).unwrap();
            assert_eq!(p.start, mapped);
            mapped = p.end;
        } else {
            let p = shrink_plan(mapped, target, chunk);
            assert_eq!(p.end, mapped);
            mapped = p.start;
        }
        assert_eq!(mapped, target.div_ceil(chunk), "target {target}");
    }
}

#[test]
fn chunk_properties_ask_for_plain_device_memory() {
    let prop = chunk_prop(3);
    assert_eq!(
        prop.type_,
        sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED
    );
    assert_eq!(
        prop.location.type_,
        sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE
    );
    assert_eq!(prop.location.id, 3);
    assert_eq!(
        prop.requestedHandleTypes,
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE
    );
}
