//! Reserve-and-commit on the host: the committed pages are exactly what the block table reports,
//! contents survive growth, and every misuse is refused with its typed error.

use super::super::memory::HostMemory;
use super::*;
use crate::backend::{Backend, BlockRange, Growable, MemoryKind};
use crate::host::HostConfig;
use crate::host::tests::page_of;

fn host(config: HostConfig) -> HostBackend {
    HostBackend::new(config).unwrap()
}

/// A host backend and its in-place growth granularity (a page).
fn host_and_page(config: HostConfig) -> (HostBackend, u64) {
    let h = host(config);
    let page = page_of(&h);
    (h, page)
}

/// A host with 1 MiB of device memory, and its page.
fn capped_host() -> (HostBackend, u64) {
    host_and_page(HostConfig {
        device_memory: Some(1 << 20),
        ..HostConfig::default()
    })
}

fn desc(size: u64) -> BlockDesc<'static> {
    BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size,
        label: "test",
    }
}

/// Start address and reservation of a reserved block.
fn reservation(h: &HostBackend, block: BlockId) -> (usize, usize) {
    let mem = lock(&h.blocks).get(block).unwrap().native.clone();
    let mem = lock(&mem);
    match &*mem {
        HostMemory::Reserved(r) => (r.base(), r.reserved()),
        _ => panic!("block {} is not reserved", block.0),
    }
}

/// Bytes of `[base, base + len)` mapped read-write and mapped without access, from the kernel's
/// own account of the process's mappings (`/proc/self/maps`).
fn mapped(base: usize, len: usize) -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let (mut rw, mut none) = (0, 0);
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        let (s, e) = range.split_once('-').unwrap();
        let (s, e) = (
            usize::from_str_radix(s, 16).unwrap(),
            usize::from_str_radix(e, 16).unwrap(),
        );
        let overlap = e.min(base + len).saturating_sub(s.max(base));
        match &perms[..3] {
            "rw-" => rw += overlap,
            "---" => none += overlap,
            _ => assert_eq!(overlap, 0, "unexpected mapping {line}"),
        }
    }
    (rw, none)
}

#[test]
fn committed_pages_are_what_the_block_reports() {
    let h = host(HostConfig::default());
    let g = h
        .extensions()
        .growable
        .expect("the host offers in-place growth on Unix")
        .in_place_growth();
    let page = g.granularity;
    let blk = h.reserve_block(&desc(4 * page), 64 * page).unwrap();
    let (base, reserved) = reservation(&h, blk);
    assert_eq!(reserved as u64, 64 * page);
    for committed in [4, 16, 64, 2, 0, 8] {
        h.resize_block(blk, committed * page).unwrap();
        let (rw, none) = mapped(base, reserved);
        assert_eq!(
            rw as u64,
            committed * page,
            "read-write bytes at {committed} pages"
        );
        assert_eq!(none as u64, (64 - committed) * page, "reserved-only bytes");
        assert_eq!(h.block_bytes(), committed * page);
    }
    h.free_block(blk).unwrap();
    // The reservation is unmapped when the block's last holder lets go of it, which a worker
    // thread may still be for a moment after `free_block` returns.
    let mut left = mapped(base, reserved);
    for _ in 0..200 {
        if left == (0, 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        left = mapped(base, reserved);
    }
    assert_eq!(left, (0, 0), "free returns the whole reservation");
    assert_eq!(h.block_bytes(), 0);
}

#[test]
fn growth_keeps_contents_and_new_bytes_read_zero() {
    let (h, page) = host_and_page(HostConfig::default());
    let blk = h.reserve_block(&desc(page), 16 * page).unwrap();
    h.write_mapped(blk, 0, &[7u8; 64]).unwrap();
    let past = BlockRange {
        block: blk,
        offset: page,
        size: 64,
    };
    assert!(matches!(h.fill_zero(past), Err(Error::OutOfBounds { .. })));
    h.resize_block(blk, 4 * page).unwrap();
    let head = BlockRange {
        block: blk,
        offset: 0,
        size: 64,
    };
    let dst = BlockRange {
        offset: 3 * page,
        ..head
    };
    let t = h.copy(head, dst).unwrap();
    h.wait_timeout(t, None).unwrap();
    let mut out = vec![1u8; 128];
    h.read_mapped(blk, 3 * page, &mut out).unwrap();
    assert_eq!(&out[..64], &[7u8; 64]);
    assert_eq!(&out[64..], &[0u8; 64], "new pages read as zero");
    // Shrinking and growing again discards the old tail's contents.
    h.resize_block(blk, page).unwrap();
    h.resize_block(blk, 4 * page).unwrap();
    h.read_mapped(blk, 3 * page, &mut out).unwrap();
    assert_eq!(out, vec![0u8; 128]);
    h.read_mapped(blk, 0, &mut out[..64]).unwrap();
    assert_eq!(&out[..64], &[7u8; 64], "the committed prefix is kept");
}

#[test]
fn misuse_is_refused_with_typed_errors() {
    let (h, page) = capped_host();
    let blk = h.reserve_block(&desc(page), 1024 * page).unwrap();
    assert!(matches!(
        h.resize_block(blk, 1025 * page),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        h.resize_block(blk, page + 1),
        Err(Error::Misaligned { .. })
    ));
    // The device's memory caps committed bytes, not address space; a refusal keeps the size.
    assert!(matches!(
        h.resize_block(blk, 1024 * page),
        Err(Error::OutOfMemory(_))
    ));
    assert_eq!(h.block_bytes(), page);
    assert!(matches!(
        h.reserve_block(&desc(2 * page), page),
        Err(Error::TooLarge { .. })
    ));
    let plain = h.alloc_block(&desc(page)).unwrap();
    assert!(matches!(
        h.resize_block(plain, 2 * page),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        h.resize_block(BlockId(999), page),
        Err(Error::UnknownBlock { .. })
    ));
    let off = host(HostConfig {
        in_place_growth: false,
        ..HostConfig::default()
    });
    assert!(off.extensions().growable.is_none());
    assert!(matches!(
        off.reserve_block(&desc(page), page),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn an_extension_is_a_hole_until_committed_and_counts_no_memory() {
    let (h, page) = capped_host();
    let blk = h.reserve_block(&desc(page), 1024 * page).unwrap();
    h.write_mapped(blk, 0, &[7u8; 64]).unwrap();
    // Past the device's memory, since nothing is committed: the range is a hole.
    h.extend_block(blk, 1024 * page).unwrap();
    assert_eq!(h.block_bytes(), page);
    let (base, _) = reservation(&h, blk);
    assert_eq!(
        mapped(base, 1024 * page as usize).0,
        1024 * page as usize,
        "the extent is usable address space"
    );
    // Committed, a page of it counts and reads as zero; the prefix keeps its contents.
    h.commit_range(blk, 8 * page, page).unwrap();
    assert_eq!(h.block_bytes(), 2 * page);
    let mut out = vec![1u8; 64];
    h.read_mapped(blk, 8 * page, &mut out).unwrap();
    assert_eq!(out, vec![0u8; 64]);
    h.read_mapped(blk, 0, &mut out).unwrap();
    assert_eq!(out, vec![7u8; 64]);
    // A remap moves the prefix's memory into the extension; a shrink drops the rest's holes.
    h.remap_range(blk, 0, 16 * page, page).unwrap();
    assert_eq!(h.block_bytes(), 2 * page);
    h.resize_block(blk, 32 * page).unwrap();
    assert_eq!(
        h.block_bytes(),
        2 * page,
        "a shrink past holes gives back nothing more"
    );
}

#[test]
fn an_extension_that_does_not_grow_is_refused_and_changes_nothing() {
    let (h, page) = host_and_page(HostConfig::default());
    let blk = h.reserve_block(&desc(4 * page), 16 * page).unwrap();
    for size in [4 * page, 2 * page] {
        assert!(matches!(
            h.extend_block(blk, size),
            Err(Error::Growth(
                tensormem_contract::GrowthError::NotAnExtension { .. }
            ))
        ));
    }
    assert!(matches!(
        h.extend_block(blk, 17 * page),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        h.extend_block(blk, 5 * page + 1),
        Err(Error::Misaligned { .. })
    ));
    let plain = h.alloc_block(&desc(page)).unwrap();
    assert!(matches!(
        h.extend_block(plain, 2 * page),
        Err(Error::Unsupported { .. })
    ));
    assert_eq!(h.block_bytes(), 5 * page);
}
