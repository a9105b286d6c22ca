#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

use super::*;

fn device_block(size: u64) -> Block {
    // A fake device address: the table never dereferences or frees it.
    Block::new(
        MemoryKind::DeviceLocal,
        size,
        Memory::Device {
            ptr: 0x7000_0000,
            pool: false,
        },
        "test",
    )
}

#[test]
fn ids_are_unique_and_never_reused() {
    let mut table = BlockTable::default();
    let a = table.insert(device_block(256));
    let b = table.insert(device_block(512));
    assert_ne!(a, b);
    assert!(table.remove(a).is_ok());
    let c = table.insert(device_block(128));
    assert!(c > b, "a freed id is not handed out again");
    // The stale id is reported, not resolved to the newer block.
    assert!(matches!(table.get(a), Err(Error::InvalidArgument(m)) if m.contains("not live")));
    assert!(matches!(table.remove(a), Err(Error::InvalidArgument(_))));
    assert!(table.get(BlockId(999)).is_err());
    assert_eq!(table.get(c).map(Block::size).ok(), Some(128));
}

#[test]
fn bytes_are_counted_per_kind() {
    let mut table = BlockTable::default();
    table.insert(device_block(256));
    table.insert(device_block(512));
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 768);
    assert_eq!(table.bytes_of(MemoryKind::Upload), 0);
    let drained = table.drain();
    assert_eq!(drained.len(), 2);
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 0);
}

#[test]
fn device_blocks_are_not_host_visible() {
    let b = device_block(64);
    assert!(b.host_ptr().is_none());
    assert_eq!(b.device_addr(), 0x7000_0000);
    assert_eq!(b.label, "test");
}
