use super::*;

#[test]
fn ids_are_fresh_and_never_reused() {
    let mut t = BlockTable::new("test");
    let a = t.insert(MemoryKind::DeviceLocal, 64, 'a');
    let b = t.insert(MemoryKind::Upload, 32, 'b');
    assert_ne!(a, b);
    assert_eq!(t.bytes(), 96);
    assert_eq!(t.bytes_of(MemoryKind::Upload), 32);
    assert_eq!(t.remove(a).map(|e| e.native).ok(), Some('a'));
    let c = t.insert(MemoryKind::DeviceLocal, 8, 'c');
    assert!(c.0 > b.0, "a freed id is never handed out again");
    assert_eq!(t.bytes(), 40);
    assert!(matches!(
        t.get(a),
        Err(Error::UnknownBlock { backend: "test", block }) if block == a.0
    ));
    assert!(matches!(t.remove(a), Err(Error::UnknownBlock { .. })));
}

#[test]
fn ranges_are_checked_with_overflow_as_out_of_bounds() {
    let mut t = BlockTable::new("test");
    let id = t.insert(MemoryKind::DeviceLocal, 100, ());
    let r = |offset, size| BlockRange {
        block: id,
        offset,
        size,
    };
    assert!(t.range(r(0, 100), "x").is_ok());
    assert!(t.range(r(99, 1), "x").is_ok());
    assert!(matches!(
        t.range(r(99, 2), "x"),
        Err(Error::OutOfBounds {
            offset: 99,
            size: 2,
            limit: 100,
            ..
        })
    ));
    assert!(matches!(
        t.range(r(u64::MAX, 2), "x"),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn insert_as_mirrors_ids_and_refuses_a_live_one() {
    let mut t = BlockTable::new("front");
    t.insert_as(BlockId(7), MemoryKind::Readback, 16, ())
        .unwrap();
    assert!(matches!(
        t.insert_as(BlockId(7), MemoryKind::Readback, 16, ()),
        Err(Error::InvariantViolated { .. })
    ));
    t.resize(BlockId(7), 48).unwrap();
    assert_eq!(t.bytes(), 48);
    assert_eq!(t.drain().len(), 1);
    assert!(t.is_empty() && t.bytes() == 0);
}
