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

/// The table's id and error rules are core's (`tensormem_contract::BlockTable`, tested there); here the
/// payload: a block's size and kind survive the round trip through an entry.
#[test]
fn entries_carry_the_cuda_block() {
    let mut table = BlockTable::new("cuda");
    let id = table.insert(MemoryKind::DeviceLocal, 256, device_block(256));
    let entry = table.get(id).unwrap();
    assert_eq!((entry.size, entry.size()), (256, 256));
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 256);
    table.remove(id).unwrap();
    assert!(matches!(
        table.get(id),
        Err(tensormem_contract::Error::UnknownBlock {
            backend: "cuda",
            ..
        })
    ));
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
    let mut table = BlockTable::new("cuda");
    let ids: Vec<BlockId> = (0..4)
        .map(|i| table.insert(MemoryKind::DeviceLocal, 64 << i, device_block(64 << i)))
        .collect();
    let mut freed = 0;
    let failed = release_all(&mut table, |m| {
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
    assert!(table.is_empty());
    assert_eq!(table.bytes_of(MemoryKind::DeviceLocal), 0);
}
