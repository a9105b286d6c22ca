//! NUMA binding of the host backend's blocks, checked by asking the kernel where the pages are
//! (`get_mempolicy` for the mapping's policy, `move_pages` for each touched page's node), on a
//! two-node topology injected from a fake sysfs tree; and the huge-page advice on large blocks,
//! read back from the mapping's flags in `/proc/self/smaps`. Linux only (`mbind`, `madvise`).
#![cfg(target_os = "linux")]

use std::sync::Arc;

use super::super::{HostBackend, HostConfig, lock};
use crate::Error;
use crate::backend::{Backend, BlockDesc, BlockId, Growable, MemoryKind};
use crate::numa::kernel::{self, PolicyMode};
use crate::numa::tests::FakeSysfs;
use crate::numa::{HostPlacement, NumaTopology};
use crate::ops::{DType, Op};
use tensormem::{Graph, Runtime, RuntimeConfig};

const PAGE: usize = 4096;

/// The placement a backend for the PCI device on node 0 of a fake two-node machine gets.
fn node0_placement() -> HostPlacement {
    let fake = FakeSysfs::two_nodes();
    fake.pci_device("0000:65:00.0", "0\n");
    let topology = NumaTopology::read(fake.path()).unwrap();
    topology.pci_device_placement("0000:65:00.0")
}

/// Start and length of a block's bytes.
fn block_span(host: &HostBackend, id: BlockId) -> (*const u8, usize) {
    let mem = lock(&host.blocks).get(id).unwrap().native.clone();
    let m = lock(&mem);
    (m.as_ptr(), m.len())
}

/// Every page of `[ptr, ptr + len)`: the mapping's policy prefers `node` only, and every page,
/// touched first, is present on `node`.
fn assert_pages_on(ptr: *const u8, len: usize, node: u32) {
    let policy = kernel::range_policy(ptr as usize).unwrap();
    assert_eq!(policy.mode, PolicyMode::Preferred, "mapping policy");
    assert_eq!(policy.nodes, vec![node]);
    let first = (ptr as usize) & !(PAGE - 1);
    let pages: Vec<*const u8> = (first..ptr as usize + len)
        .step_by(PAGE)
        .map(|a| a as *const u8)
        .collect();
    let nodes = kernel::page_nodes(&pages).unwrap();
    assert!(nodes.iter().all(|n| *n == Ok(node)), "page nodes {nodes:?}");
}

/// Writes every page of the block, so each is faulted in under its policy.
fn touch(host: &HostBackend, id: BlockId, len: usize) {
    host.write_mapped(id, 0, &vec![7u8; len]).unwrap();
}

#[test]
fn blocks_of_every_kind_are_bound_before_first_touch() {
    let placement = node0_placement();
    assert_eq!(placement.bound_node(), Some(0));
    let host = HostBackend::new(HostConfig {
        host_placement: placement.clone(),
        ..HostConfig::default()
    })
    .unwrap();
    assert_eq!(host.capabilities().host_placement, placement);
    for (kind, size) in [
        (MemoryKind::Upload, 3 * PAGE as u64 + 100),
        (MemoryKind::Readback, 64),
        (MemoryKind::DeviceLocal, 1 << 20),
    ] {
        let id = host
            .alloc_block(&BlockDesc {
                kind,
                size,
                label: "numa",
            })
            .unwrap();
        let (ptr, len) = block_span(&host, id);
        assert_eq!(len as u64, size, "the block is exactly its size");
        assert_eq!(ptr as usize % PAGE, 0, "a mapping of its own");
        // Before the first touch, no page exists anywhere: the policy came first.
        let first = kernel::page_nodes(&[ptr]).unwrap();
        assert_eq!(
            first,
            vec![Err(libc::ENOENT)],
            "{kind:?} touched before binding"
        );
        touch(&host, id, len);
        assert_pages_on(ptr, len, 0);
        // Contents survive as on an unbound block.
        let mut back = vec![0u8; len];
        host.read_mapped(id, 0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 7));
        host.free_block(id).unwrap();
    }
}

#[test]
fn unconfigured_blocks_keep_the_default_policy() {
    let host = HostBackend::new(HostConfig::default()).unwrap();
    assert_eq!(host.capabilities().host_placement.policy(), "none");
    let size = 1 << 20;
    let id = host
        .alloc_block(&BlockDesc {
            kind: MemoryKind::Upload,
            size,
            label: "plain",
        })
        .unwrap();
    let (ptr, _) = block_span(&host, id);
    assert_eq!(
        kernel::range_policy(ptr as usize).unwrap().mode,
        PolicyMode::Default
    );
    host.free_block(id).unwrap();
}

#[test]
fn a_reserved_block_keeps_its_node_through_shrink_and_regrowth() {
    let host = HostBackend::new(HostConfig {
        host_placement: node0_placement(),
        ..HostConfig::default()
    })
    .unwrap();
    let growth = host.extensions().growable.unwrap().in_place_growth();
    let g = growth.granularity;
    let desc = BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size: 4 * g,
        label: "grows",
    };
    let id = host.reserve_block(&desc, 64 * g).unwrap();
    touch(&host, id, 4 * g as usize);
    let (ptr, _) = block_span(&host, id);
    assert_pages_on(ptr, 4 * g as usize, 0);
    // Shrinking remaps the tail afresh (the policy of that range is lost with it) ...
    host.resize_block(id, g).unwrap();
    // ... and growing binds again before the new pages are touched.
    host.resize_block(id, 16 * g).unwrap();
    touch(&host, id, 16 * g as usize);
    let (ptr2, len) = block_span(&host, id);
    assert_eq!(ptr2, ptr, "grows in place");
    assert_pages_on(ptr, len, 0);
    host.free_block(id).unwrap();
}

#[test]
fn a_node_the_kernel_refuses_is_a_typed_error_at_creation() {
    if kernel::allowed_nodes().unwrap().contains(&1) {
        return; // A real two-node machine: node 1 is fine there.
    }
    let config = HostConfig {
        host_placement: HostPlacement::Bound {
            node: 1,
            source: "configured".into(),
        },
        ..HostConfig::default()
    };
    match HostBackend::new(config) {
        Err(Error::NumaNode {
            node: 1, usable, ..
        }) => assert!(usable.contains(&0)),
        Err(e) => panic!("node 1 refused with the wrong error: {e}"),
        Ok(_) => panic!("node 1 accepted on a machine without it"),
    }
    let driver = HostConfig {
        host_placement: HostPlacement::DriverPlaced { device_node: None },
        ..HostConfig::default()
    };
    assert!(matches!(
        HostBackend::new(driver),
        Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
    ));
}

/// The runtime's staging belt (uploads and readbacks on a device without host-visible memory)
/// gets its blocks from the backend, so they are bound too; the memory report says where.
#[test]
fn the_staging_belt_and_the_memory_report_follow_the_placement() {
    let host = Arc::new(
        HostBackend::new(HostConfig {
            force_staging: true,
            host_placement: node0_placement(),
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let rt = Runtime::new(host.clone(), RuntimeConfig::default()).unwrap();
    let data: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
    let t = rt.tensor_from(DType::F32, &[100_000], &data, "x").unwrap();
    assert_eq!(rt.download::<f32>(&t).unwrap(), data);
    let staging: Vec<BlockId> = lock(&host.blocks)
        .iter()
        .filter(|(_, e)| e.kind != MemoryKind::DeviceLocal)
        .map(|(id, _)| id)
        .collect();
    assert!(!staging.is_empty(), "the belt staged the transfers");
    for id in staging {
        let (ptr, len) = block_span(&host, id);
        touch(&host, id, len);
        assert_pages_on(ptr, len, 0);
    }
    rt.free(t).unwrap();

    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4]);
    let y = g.op(Op::Relu { len: 4 }, &[x], &[4], "relu").unwrap();
    g.output(y);
    let model = rt.compile(&g).unwrap();
    let report = model.memory_report();
    assert_eq!(report.host_memory.bound_node(), Some(0));
    assert_eq!(report.host_memory.policy(), "bound");
}

/// The `VmFlags` of the mapping that holds `addr`, from `/proc/self/smaps`.
fn mapping_flags(addr: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        let bounds = range
            .filter(|_| !line.starts_with("VmFlags"))
            .map(|(lo, hi)| (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)));
        if let Some((Ok(lo), Ok(hi))) = bounds {
            inside = (lo..hi).contains(&addr);
            continue;
        }
        if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return flags.split_whitespace().map(str::to_string).collect();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

#[test]
fn large_blocks_ask_for_huge_pages_and_small_ones_do_not() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        eprintln!("skipped: this kernel has no transparent huge pages");
        return;
    }
    const HUGE: usize = 2 << 20;
    let host = HostBackend::new(HostConfig::default()).unwrap();
    let desc = |size: u64| BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size,
        label: "huge",
    };
    // A regular block of several huge pages: its whole huge pages are advised.
    let big = host.alloc_block(&desc(5 * HUGE as u64 + 100)).unwrap();
    let (ptr, len) = block_span(&host, big);
    let inner = (ptr as usize).next_multiple_of(HUGE);
    assert!(inner + HUGE <= ptr as usize + len);
    assert!(
        mapping_flags(inner).iter().any(|f| f == "hg"),
        "regular block"
    );
    // A block that grows in place: its reservation is advised.
    let growth = host.extensions().growable.unwrap().in_place_growth();
    let reserved = host
        .reserve_block(&desc(growth.granularity), 8 * HUGE as u64)
        .unwrap();
    let (rptr, _) = block_span(&host, reserved);
    let rinner = (rptr as usize).next_multiple_of(HUGE);
    assert!(
        mapping_flags(rinner).iter().any(|f| f == "hg"),
        "reserved block"
    );
    // A block smaller than a huge page is left alone (its flags are its heap's).
    let small = host.alloc_block(&desc(64 << 10)).unwrap();
    let (sptr, _) = block_span(&host, small);
    assert!(
        !mapping_flags(sptr as usize).iter().any(|f| f == "hg"),
        "small block"
    );
    // Contents are unaffected.
    touch(&host, big, len);
    let mut back = vec![0u8; len];
    host.read_mapped(big, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 7));
    for id in [big, reserved, small] {
        host.free_block(id).unwrap();
    }
}
