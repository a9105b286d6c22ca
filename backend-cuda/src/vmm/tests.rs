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
fn growth_maps_the_missing_bytes_as_one_mapping() {
    let chunk = 2 * MIB;
    assert_eq!(grow_plan(0, 1, chunk, 64 * MIB).ok(), Some(2 * MIB));
    // Regression (issue 14): a growth of many granules is one mapping of all of them, not one
    // per granule (three driver calls per 2 MiB made in-place growth slower than a copy).
    assert_eq!(
        grow_plan(4 * MIB, 37 * MIB, chunk, 64 * MIB).ok(),
        Some(34 * MIB)
    );
    // Already large enough: nothing to map (never shrinks).
    assert_eq!(grow_plan(8 * MIB, 3 * MIB, chunk, 64 * MIB).ok(), Some(0));
    // Exactly the reservation.
    assert_eq!(grow_plan(0, 64 * MIB, chunk, 64 * MIB).ok(), Some(64 * MIB));
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
fn shrink_keeps_the_mapping_that_holds_the_target() {
    // Back to back: 4, 2, 10 and 2 MiB.
    let units = [
        (0, 4 * MIB),
        (4 * MIB, 2 * MIB),
        (6 * MIB, 10 * MIB),
        (16 * MIB, 2 * MIB),
    ];
    let end = |target| shrink_end(&units, target, 2 * MIB, 18 * MIB).unwrap();
    assert_eq!(end(0), 0);
    assert_eq!(end(1), 4 * MIB);
    assert_eq!(end(4 * MIB), 4 * MIB);
    assert_eq!(end(4 * MIB + 1), 6 * MIB);
    // Inside the 10 MiB growth: it stays whole (a mapping cannot be returned in part).
    assert_eq!(end(7 * MIB), 16 * MIB);
    assert_eq!(end(16 * MIB), 16 * MIB);
    // More than is mapped: "shrinking" keeps everything.
    assert_eq!(end(100 * MIB), 18 * MIB);
    // With holes: a target in a hole ends there, rounded up to the chunk.
    let holed = [(0, 4 * MIB), (10 * MIB, 4 * MIB)];
    assert_eq!(
        shrink_end(&holed, 5 * MIB, 2 * MIB, 14 * MIB).unwrap(),
        6 * MIB
    );
    assert_eq!(
        shrink_end(&holed, 11 * MIB, 2 * MIB, 14 * MIB).unwrap(),
        14 * MIB
    );
    assert_eq!(shrink_end(&[], 5, 2 * MIB, 0).unwrap(), 0);
}

#[test]
fn grow_then_shrink_in_a_model_keeps_whole_growths() {
    // Replays a varying-size workload against the plans: every growth adds one mapping, the
    // mapped size always holds the target, and a shrink keeps at most the growth that holds it.
    let chunk = 2 * MIB;
    let reserved = 256 * MIB;
    let mut units: Vec<(u64, u64)> = Vec::new();
    for target in [
        3 * MIB,
        40 * MIB,
        7 * MIB,
        256 * MIB,
        0,
        1,
        100 * MIB,
        99 * MIB,
    ] {
        let mapped: u64 = units.iter().map(|u| u.1).sum();
        if target > mapped {
            let add = grow_plan(mapped, target, chunk, reserved).unwrap();
            units.push((mapped, add));
            assert_eq!(
                mapped + add,
                target.div_ceil(chunk) * chunk,
                "target {target}"
            );
        } else {
            let end = shrink_end(&units, target, chunk, mapped).unwrap();
            units.retain(|(offset, _)| *offset < end);
            let now: u64 = units.iter().map(|u| u.1).sum();
            assert_eq!(now, end, "back to back");
            assert!(now >= target, "target {target}");
            let last = units.last().map_or(0, |u| u.1);
            assert!(
                now - last < target || now == 0,
                "kept a growth past the target"
            );
        }
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
