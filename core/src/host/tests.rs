//! Unit tests of the host backend: the asynchronous timeline, mapping rules, fault simulation.

use std::time::Duration;

use super::*;

fn backend(config: HostConfig) -> HostBackend {
    HostBackend::new(config).unwrap()
}

fn desc(kind: MemoryKind, size: u64) -> BlockDesc<'static> {
    BlockDesc {
        kind,
        size,
        label: "test",
    }
}

#[test]
fn work_completes_asynchronously_in_order() {
    let b = backend(HostConfig {
        worker_delay: Duration::from_millis(20),
        ..HostConfig::default()
    });
    let blk = b.alloc_block(&desc(MemoryKind::DeviceLocal, 64)).unwrap();
    b.write_mapped(blk, 0, &[7u8; 32]).unwrap();
    let r = |offset| BlockRange {
        block: blk,
        offset,
        size: 32,
    };
    let t1 = b.copy(r(0), r(32)).unwrap();
    let t2 = b.fill_zero(r(0)).unwrap();
    assert!(t2 > t1);
    // With a 20 ms worker delay, the second command cannot have finished yet.
    assert!(b.completed().unwrap() < t2);
    b.wait(t2).unwrap();
    assert!(b.completed().unwrap() >= t2);
    let mut out = [1u8; 64];
    b.read_mapped(blk, 0, &mut out).unwrap();
    assert_eq!(&out[..32], &[0u8; 32]);
    assert_eq!(&out[32..], &[7u8; 32]);
}

#[test]
fn waiting_for_an_unissued_ticket_is_an_error() {
    let b = backend(HostConfig::default());
    assert!(matches!(b.wait(Ticket(99)), Err(Error::InvalidArgument(_))));
    b.wait(Ticket::DONE).unwrap();
}

#[test]
fn force_staging_hides_device_memory_from_the_host() {
    let b = backend(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    });
    assert!(!b.capabilities().device_host_visible);
    let dev = b.alloc_block(&desc(MemoryKind::DeviceLocal, 16)).unwrap();
    assert!(matches!(
        b.write_mapped(dev, 0, &[0; 4]),
        Err(Error::Unsupported { .. })
    ));
    let up = b.alloc_block(&desc(MemoryKind::Upload, 16)).unwrap();
    b.write_mapped(up, 0, &[1; 16]).unwrap();
}

#[test]
fn bad_ranges_and_blocks_are_errors() {
    let b = backend(HostConfig::default());
    let blk = b.alloc_block(&desc(MemoryKind::Upload, 16)).unwrap();
    assert!(matches!(
        b.write_mapped(blk, 8, &[0; 16]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        b.write_mapped(blk, u64::MAX, &[0; 1]),
        Err(Error::OutOfBounds { .. })
    ));
    let r = BlockRange {
        block: blk,
        offset: 0,
        size: 8,
    };
    assert!(matches!(
        b.copy(r, BlockRange { size: 4, ..r }),
        Err(Error::SizeMismatch { .. })
    ));
    b.free_block(blk).unwrap();
    assert!(matches!(b.free_block(blk), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        b.alloc_block(&desc(MemoryKind::Upload, 0)),
        Err(Error::ZeroSize { .. })
    ));
}

#[test]
fn device_memory_limit_and_loss() {
    let b = backend(HostConfig {
        device_memory: Some(100),
        ..HostConfig::default()
    });
    let blk = b.alloc_block(&desc(MemoryKind::DeviceLocal, 64)).unwrap();
    let e = b
        .alloc_block(&desc(MemoryKind::DeviceLocal, 64))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory(_)) && e.is_retryable());
    b.simulate_device_loss();
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        b.alloc_block(&desc(MemoryKind::DeviceLocal, 4)),
        Err(Error::DeviceLost { .. })
    ));
    // Freeing still works so a runtime can tear down.
    b.free_block(blk).unwrap();
}
