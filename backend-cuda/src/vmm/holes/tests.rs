use super::*;

const MIB: u64 = 1 << 20;

#[test]
fn holes_are_whole_chunks_inside_the_extent() {
    let c = 2 * MIB;
    assert!(chunks(true, 4 * MIB, 6 * MIB, c, 16 * MIB).is_ok());
    assert!(chunks(true, 0, 16 * MIB, c, 16 * MIB).is_ok());
    assert!(matches!(
        chunks(true, MIB, 2 * MIB, c, 16 * MIB),
        Err(Error::Misaligned { value, .. }) if value == MIB
    ));
    assert!(matches!(
        chunks(true, 0, 3 * MIB, c, 16 * MIB),
        Err(Error::Misaligned { value, .. }) if value == 3 * MIB
    ));
    assert!(matches!(
        chunks(true, 0, 0, c, 16 * MIB),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        chunks(true, 14 * MIB, 4 * MIB, c, 16 * MIB),
        Err(Error::OutOfBounds { limit, .. }) if limit == 16 * MIB
    ));
    assert!(matches!(
        chunks(true, u64::MAX - c + 1, c, c, 16 * MIB),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn an_extension_adds_whole_chunks_up_to_the_reservation() {
    let c = 2 * MIB;
    assert_eq!(
        extension(0, true, 4 * MIB, 10 * MIB, c, 16 * MIB).unwrap(),
        6 * MIB
    );
    assert_eq!(
        extension(0, true, 0, 16 * MIB, c, 16 * MIB).unwrap(),
        16 * MIB
    );
    for target in [4 * MIB, 2 * MIB] {
        assert!(matches!(
            extension(0, true, 4 * MIB, target, c, 16 * MIB),
            Err(Error::Growth(
                tensormem_contract::GrowthError::NotAnExtension { .. }
            ))
        ));
    }
    assert!(matches!(
        extension(0, true, 4 * MIB, 5 * MIB, c, 16 * MIB),
        Err(Error::Misaligned { value, .. }) if value == MIB
    ));
    assert!(matches!(
        extension(0, true, 4 * MIB, 18 * MIB, c, 16 * MIB),
        Err(Error::OutOfBounds { limit, .. }) if limit == 16 * MIB
    ));
    assert!(matches!(
        extension(0, false, 4 * MIB, 8 * MIB, c, 16 * MIB),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn a_segment_without_holes_refuses_them() {
    assert!(matches!(
        chunks(false, 0, 2 * MIB, 2 * MIB, 16 * MIB),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn ranges_take_whole_units_and_say_what_they_hold() {
    // Units of 4 and 6 MiB, a hole of 2 MiB, a unit of 2 MiB.
    let units: BTreeMap<u64, u64> = [(0, 4 * MIB), (4 * MIB, 6 * MIB), (12 * MIB, 2 * MIB)]
        .into_iter()
        .collect();
    let (inside, held) = units_in(&units, 4 * MIB, 10 * MIB).unwrap();
    assert_eq!(inside, vec![(4 * MIB, 6 * MIB), (12 * MIB, 2 * MIB)]);
    assert_eq!(held, 8 * MIB);
    // The hole alone holds nothing (a commit's or a remap's target).
    assert_eq!(units_in(&units, 10 * MIB, 2 * MIB).unwrap().1, 0);
    // Cutting a unit at either end is refused (`cuMemUnmap` takes whole mappings).
    assert!(matches!(
        units_in(&units, 2 * MIB, 2 * MIB),
        Err(Error::Growth(
            tensormem_contract::GrowthError::CutsUnit { .. }
        ))
    ));
    assert!(matches!(
        units_in(&units, 4 * MIB, 4 * MIB),
        Err(Error::Growth(
            tensormem_contract::GrowthError::CutsUnit { .. }
        ))
    ));
    assert!(matches!(
        units_in(&units, 10 * MIB, 4 * MIB),
        Ok((_, held)) if held == 2 * MIB
    ));
}
