//! Block allocation, freeing and mapped host access.

use tensormem::{Backend, BlockDesc, Error, MemoryKind};
use tensormem_vulkan::{VulkanBackend, VulkanConfig};

use crate::{alloc, on_each, on_each_front};

const KINDS: [MemoryKind; 3] = [
    MemoryKind::DeviceLocal,
    MemoryKind::Upload,
    MemoryKind::Readback,
];

#[test]
fn capabilities_describe_the_device() {
    on_each(|name, b| {
        let c = b.capabilities();
        assert_eq!(c.backend, "vulkan");
        assert!(!c.device_name.is_empty());
        assert!(c.binding_align.is_power_of_two() && c.binding_align >= 4);
        assert_eq!(c.copy_align, 4);
        assert!(c.max_binding_size > 0 && c.max_binding_size <= c.max_block_size);
        assert!(c.budget.is_some_and(|b| b > 0));
        if name != "zero-copy" {
            assert!(!c.device_host_visible, "{name}: staging forced");
        }
    });
}

#[test]
fn alloc_and_free_every_kind_and_size() {
    on_each(|name, b| {
        let mut ids = Vec::new();
        for kind in KINDS {
            // Small, odd-but-aligned, and one above the 32 MiB dedicated threshold.
            for size in [4u64, 4100, 1 << 20, (32 << 20) + 4] {
                ids.push(alloc(b, kind, size));
            }
        }
        assert_eq!(b.stats().blocks, ids.len(), "{name}");
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{name}: block ids are unique");
        for id in ids {
            b.free_block(id).unwrap();
        }
        assert_eq!(b.stats().blocks, 0);
    });
}

#[test]
fn bad_block_requests_are_specific_errors() {
    on_each_front(|name, b| {
        let zero = b.alloc_block(&BlockDesc {
            kind: MemoryKind::Upload,
            size: 0,
            label: "z",
        });
        assert!(
            matches!(zero, Err(Error::ZeroSize { what: "block" })),
            "{name}: {zero:?}"
        );
        let max = b.capabilities().max_block_size;
        let huge = b.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: max + 4,
            label: "h",
        });
        match huge {
            Err(Error::TooLarge {
                requested, limit, ..
            }) => {
                assert_eq!((requested, limit), (max + 4, max));
            }
            other => panic!("{name}: {other:?}"),
        }
        let id = alloc(b, MemoryKind::Upload, 64);
        b.free_block(id).unwrap();
        assert!(
            matches!(
                b.free_block(id),
                Err(Error::UnknownBlock {
                    backend: "vulkan",
                    ..
                })
            ),
            "double free"
        );
        assert!(
            matches!(
                b.write_mapped(id, 0, &[1; 4]),
                Err(Error::UnknownBlock { .. })
            ),
            "stale"
        );
    });
}

#[test]
fn mapped_round_trip_and_bounds() {
    on_each(|name, b| {
        for kind in [MemoryKind::Upload, MemoryKind::Readback] {
            let id = alloc(b, kind, 1000);
            let data: Vec<u8> = (0..600).map(|i| (i * 7 % 251) as u8).collect();
            b.write_mapped(id, 200, &data).unwrap();
            let mut out = vec![0u8; 600];
            b.read_mapped(id, 200, &mut out).unwrap();
            assert_eq!(out, data, "{name} {kind:?}");
            // Unaligned sub-range inside (the atom widening must not disturb neighbours).
            b.write_mapped(id, 201, &[0xAB; 3]).unwrap();
            let mut small = [0u8; 5];
            b.read_mapped(id, 200, &mut small).unwrap();
            assert_eq!(small, [data[0], 0xAB, 0xAB, 0xAB, data[4]]);
            match b.write_mapped(id, 990, &[0; 11]) {
                Err(Error::OutOfBounds {
                    offset: 990,
                    size: 11,
                    limit: 1000,
                    ..
                }) => {}
                other => panic!("{name}: {other:?}"),
            }
            assert!(matches!(
                b.read_mapped(id, u64::MAX, &mut [0; 1]),
                Err(Error::OutOfBounds { .. })
            ));
            b.free_block(id).unwrap();
        }
        let dev = alloc(b, MemoryKind::DeviceLocal, 256);
        let r = b.write_mapped(dev, 0, &[1, 2, 3, 4]);
        if b.capabilities().device_host_visible {
            r.unwrap();
            let mut out = [0u8; 4];
            b.read_mapped(dev, 0, &mut out).unwrap();
            assert_eq!(out, [1, 2, 3, 4]);
        } else {
            assert!(matches!(r, Err(Error::Unsupported { .. })), "{name}: {r:?}");
        }
        b.free_block(dev).unwrap();
    });
}

#[test]
fn no_matching_device_is_unavailable_not_a_panic() {
    let r = VulkanBackend::new(VulkanConfig {
        device_name: Some("no such device anywhere".into()),
        ..VulkanConfig::default()
    });
    match r {
        Err(Error::BackendUnavailable {
            backend: "vulkan",
            reason,
        }) => {
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a device matched an impossible name"),
    }
}
