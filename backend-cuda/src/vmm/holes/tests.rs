#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use super::*;

const MIB: u64 = 1 << 20;

#[test]
fn holes_are_whole_chunks_inside_the_extent() {
    let c = 2 * MIB;
    assert_eq!(
        chunks(true, 4 * MIB, 6 * MIB, c, 16 * MIB).ok(),
        Some((2, 3))
    );
    assert_eq!(chunks(true, 0, 16 * MIB, c, 16 * MIB).ok(), Some((0, 8)));
    assert!(matches!(
        chunks(true, MIB, 2 * MIB, c, 16 * MIB),
        Err(Error::Misaligned { value, .. }) if value == MIB
    ));
    assert!(matches!(
        chunks(true, 0, 3 * MIB, c, 16 * MIB),
        Err(Error::Misaligned { value, .. }) if value == 3 * MIB
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
fn a_segment_without_holes_refuses_them() {
    assert!(matches!(
        chunks(false, 0, 2 * MIB, 2 * MIB, 16 * MIB),
        Err(Error::Unsupported { .. })
    ));
}
