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
    assert!(table.release_all(|_| Ok(())).is_empty());
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 0);
}

#[test]
fn device_blocks_are_not_host_visible() {
    let b = device_block(64);
    assert!(b.host_ptr().is_none());
    assert_eq!(b.device_addr(), 0x7000_0000);
    assert_eq!(b.label, "test");
}

#[test]
fn release_all_frees_every_block_past_failures() {
    let mut table = BlockTable::default();
    let ids: Vec<BlockId> = (0..4)
        .map(|i| table.insert(device_block(64 << i)))
        .collect();
    let mut freed = 0;
    let failed = table.release_all(|m| {
        freed += 1;
        match m {
            // One block's free fails (a lost device reports a sticky error per call).
            Memory::Device { .. } if freed == 2 => Err(Error::DeviceLost {
                backend: "cuda",
                detail: "cuMemFree returned CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            }),
            _ => Ok(()),
        }
    });
    assert_eq!(
        freed, 4,
        "every block is handed to free, also after a failure"
    );
    assert_eq!(failed.len(), 1);
    assert!(ids.contains(&failed[0].0));
    assert_eq!(table.iter().count(), 0);
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 0);
}
