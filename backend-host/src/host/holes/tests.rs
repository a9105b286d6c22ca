use std::sync::Arc;

use super::*;
use crate::HostConfig;
use crate::backend::{Backend, BlockDesc, Growable, MemoryKind};
use crate::host::tests::page_of;

#[test]
fn decommitted_ranges_merge_split_and_count() {
    let mut d = Decommitted::default();
    assert_eq!(d.add(10, 20), 10);
    assert_eq!(d.add(20, 30), 10, "adjacent ranges merge");
    assert_eq!(d.add(5, 25), 5, "only what was not in the set counts");
    assert_eq!(d.bytes(), 25);
    assert_eq!(d.remove(12, 14), 2, "a removal splits a range");
    assert_eq!(d.bytes(), 23);
    assert_eq!(d.remove(0, 100), 23);
    assert_eq!(d.bytes(), 0);
    assert_eq!(d.remove(0, 100), 0);
}

fn reserved(host: &HostBackend, pages: u64) -> (crate::backend::BlockId, u64) {
    let page = page_of(host);
    let desc = BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size: pages * page,
        label: "holes",
    };
    (host.reserve_block(&desc, 64 * page).unwrap(), page)
}

#[test]
fn a_hole_reads_zero_and_leaves_the_committed_count() {
    let host = HostBackend::new(HostConfig::default()).unwrap();
    let (b, page) = reserved(&host, 8);
    host.write_mapped(b, 0, &vec![7u8; (8 * page) as usize])
        .unwrap();
    host.decommit_range(b, 2 * page, 3 * page).unwrap();
    assert_eq!(host.block_bytes(), 5 * page);
    let mut out = vec![1u8; (8 * page) as usize];
    host.read_mapped(b, 0, &mut out).unwrap();
    let p = page as usize;
    assert!(out[..2 * p].iter().all(|x| *x == 7));
    assert!(
        out[2 * p..5 * p].iter().all(|x| *x == 0),
        "pages given back read zero"
    );
    assert!(out[5 * p..].iter().all(|x| *x == 7));
    // A remap moves committed bytes: the count stays.
    host.remap_range(b, 6 * page, 2 * page, page).unwrap();
    assert_eq!(host.block_bytes(), 5 * page);
    host.commit_range(b, 3 * page, 2 * page).unwrap();
    assert_eq!(host.block_bytes(), 7 * page);
    // Shrinking past a hole forgets it; freeing forgets the rest.
    host.resize_block(b, 7 * page).unwrap();
    assert_eq!(host.block_bytes(), 6 * page);
    host.free_block(b).unwrap();
    assert_eq!(host.block_bytes(), 0);
}

#[test]
fn device_memory_counts_committed_bytes_only() {
    let host = HostBackend::new(HostConfig {
        device_memory: Some(6 * 4096),
        ..HostConfig::default()
    })
    .unwrap();
    let (b, page) = reserved(&host, 1);
    if page != 4096 {
        return;
    }
    host.resize_block(b, 6 * page).unwrap();
    assert!(
        host.resize_block(b, 7 * page).is_err(),
        "the limit is reached"
    );
    host.decommit_range(b, page, 2 * page).unwrap();
    // Two pages given back: growth by two fits again.
    host.resize_block(b, 8 * page).unwrap();
    assert!(matches!(
        host.commit_range(b, page, page),
        Err(crate::Error::OutOfMemory(_))
    ));
    host.free_block(b).unwrap();
}

/// Under `force_staging` a staging reservation is host memory: it takes nothing from the device's
/// limit, and its holes lend the device nothing.
#[test]
fn staging_reservations_and_their_holes_leave_the_device_limit() {
    let host = HostBackend::new(HostConfig {
        force_staging: true,
        device_memory: Some(2 * 4096),
        ..HostConfig::default()
    })
    .unwrap();
    let page = page_of(&host);
    if page != 4096 {
        return;
    }
    let desc = BlockDesc {
        kind: MemoryKind::Upload,
        size: 4 * page,
        label: "staging",
    };
    let staging = host.reserve_block(&desc, 64 * page).unwrap();
    host.decommit_range(staging, 0, 4 * page).unwrap();
    let (dev, _) = reserved(&host, 2);
    assert!(
        matches!(
            host.resize_block(dev, 3 * page),
            Err(crate::Error::OutOfMemory(_))
        ),
        "the staging holes lend the device nothing"
    );
    host.commit_range(staging, 0, 4 * page).unwrap();
    host.resize_block(staging, 8 * page).unwrap();
    host.free_block(staging).unwrap();
    host.free_block(dev).unwrap();
    assert_eq!(host.block_bytes(), 0);
}

#[test]
fn holes_outside_a_reserved_block_are_refused() {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let (b, page) = reserved(&host, 2);
    assert!(matches!(
        host.decommit_range(b, page, 2 * page),
        Err(crate::Error::OutOfBounds { .. })
    ));
    let plain = host
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: page,
            label: "plain",
        })
        .unwrap();
    assert!(matches!(
        host.commit_range(plain, 0, page),
        Err(crate::Error::Unsupported { .. })
    ));
}
