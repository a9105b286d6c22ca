//! Blocks that grow in place on sparse buffers, on a driver that offers sparse binding (Mesa 25's
//! lavapipe in CI, `scripts/test.sh`): reserve, grow, extend, shrink, holes, and device work over
//! granule boundaries, through core's validating front. On a driver without sparse binding the
//! tests report themselves skipped, unless `TENSORMEM_REQUIRE_VULKAN_SPARSE=1`, when they fail.

use tensormem::{Backend, BlockDesc, BlockId, Growable, InPlaceGrowth, MemoryKind, Op, Validated};
use tensormem_vulkan::{VulkanBackend, VulkanConfig};

use crate::{bytes_f32, download, f32_bytes, on_each_front, range, upload};

/// The backend's growth, or `None` (skipped with a reason, or failing where sparse is required).
fn sparse(name: &str, b: &dyn Backend) -> Option<InPlaceGrowth> {
    let growth = b.growable().map(|g| g.in_place_growth());
    if growth.is_none() {
        let device = &b.capabilities().device_name;
        if std::env::var("TENSORMEM_REQUIRE_VULKAN_SPARSE").is_ok_and(|v| v == "1") {
            panic!(
                "{name}: TENSORMEM_REQUIRE_VULKAN_SPARSE=1 but {device} offers no sparse binding"
            );
        }
        eprintln!("SKIPPED ({name}): {device} offers no sparse binding");
    }
    growth
}

/// Runs `case` on each front whose backend offers sparse growth, with that growth; the others are
/// skipped (or fail) as [`sparse`] says.
fn on_each_sparse_front(case: impl Fn(&str, &Validated, InPlaceGrowth)) {
    on_each_front(|name, b| {
        if let Some(growth) = sparse(name, b) {
            case(name, b, growth);
        }
    });
}

fn reserve(b: &Validated, committed: u64, reserve: u64) -> BlockId {
    b.reserve_block(
        &BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: committed,
            label: "sparse test",
        },
        reserve,
    )
    .unwrap()
}

/// `len` bytes that differ from every other call's with a different `seed`.
fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn growth_is_offered_with_whole_granules() {
    on_each_sparse_front(|name, _, g| {
        assert!(
            g.granularity.is_power_of_two() && g.granularity >= 64 << 10,
            "{name}: {g:?}"
        );
        assert!(g.max_reserve >= g.granularity && g.max_reserve.is_multiple_of(g.granularity));
        assert!(g.holes, "{name}");
    });
}

#[test]
fn sparse_growth_off_takes_the_blocks_path() {
    let config = VulkanConfig {
        sparse_growth: false,
        ..VulkanConfig::default()
    };
    if let Ok(b) = VulkanBackend::new(config) {
        assert!(b.extensions().growable.is_none());
        let desc = BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 0,
            label: "off",
        };
        assert!(matches!(
            b.reserve_block(&desc, 2 << 20),
            Err(tensormem::Error::Unsupported { .. })
        ));
    }
}

#[test]
fn grow_write_across_granules_and_shrink_keep_contents() {
    on_each_sparse_front(|name, b, growth| {
        let g = growth.granularity;
        let block = reserve(b, g, 8 * g);
        assert_eq!(b.resize_block(block, 3 * g).unwrap(), 3 * g, "{name}");
        // One write over both inner granule boundaries.
        let data = pattern(1, 2 * g + 1024);
        upload(b, block, g - 1024, &data);
        assert_eq!(
            download(b, block, g - 1024, data.len() as u64),
            data,
            "{name}"
        );
        // Shrinking to one granule keeps its bytes; growing again maps fresh memory after it.
        assert_eq!(b.resize_block(block, g).unwrap(), g, "{name}");
        assert_eq!(b.resize_block(block, 2 * g).unwrap(), 2 * g, "{name}");
        assert_eq!(download(b, block, g - 1024, 1024), data[..1024], "{name}");
        let tail = pattern(2, g);
        upload(b, block, g, &tail);
        assert_eq!(
            download(b, block, 0, 2 * g)[g as usize..],
            tail[..],
            "{name}"
        );
        b.free_block(block).unwrap();
    });
}

#[test]
fn an_extension_binds_nothing_until_committed_or_remapped() {
    on_each_sparse_front(|name, b, growth| {
        let g = growth.granularity;
        let block = reserve(b, g, 8 * g);
        let first = pattern(30, g);
        upload(b, block, 0, &first);
        b.extend_block(block, 4 * g).unwrap();
        assert!(
            b.extend_block(block, 9 * g).is_err(),
            "{name}: past the reservation"
        );
        assert!(b.extend_block(block, 4 * g).is_err(), "{name}: no growth");
        // The extension is holes: a remap moves the first granule's memory into it, a commit
        // backs another, and both take data.
        b.remap_range(block, 0, 3 * g, g).unwrap();
        assert_eq!(
            download(b, block, 3 * g, g),
            first,
            "{name}: remapped granule"
        );
        b.commit_range(block, g, g).unwrap();
        let fresh = pattern(31, g);
        upload(b, block, g, &fresh);
        assert_eq!(download(b, block, g, g), fresh, "{name}");
        assert_eq!(download(b, block, 3 * g, g), first, "{name}");
        b.free_block(block).unwrap();
    });
}

#[test]
fn holes_keep_the_contents_of_untouched_granules() {
    on_each_sparse_front(|name, b, growth| {
        let g = growth.granularity;
        let block = reserve(b, 4 * g, 4 * g);
        let granules: Vec<Vec<u8>> = (0..4).map(|i| pattern(10 + i as u8, g)).collect();
        for (i, p) in granules.iter().enumerate() {
            upload(b, block, i as u64 * g, p);
        }
        b.decommit_range(block, g, g).unwrap();
        b.commit_range(block, g, g).unwrap();
        assert_eq!(download(b, block, 0, g), granules[0], "{name}");
        assert_eq!(
            download(b, block, 2 * g, 2 * g),
            [&granules[2][..], &granules[3]].concat()
        );
        // A remap moves memory, so granule 3's bytes appear at granule 1 (Vulkan binds the same
        // allocation there; the contract leaves them unspecified).
        b.decommit_range(block, g, g).unwrap();
        b.remap_range(block, 3 * g, g, g).unwrap();
        assert_eq!(
            download(b, block, g, g),
            granules[3],
            "{name}: remapped granule"
        );
        assert_eq!(download(b, block, 0, g), granules[0], "{name}");
        assert_eq!(download(b, block, 2 * g, g), granules[2], "{name}");
        b.commit_range(block, 3 * g, g).unwrap();
        let fresh = pattern(20, g);
        upload(b, block, 3 * g, &fresh);
        assert_eq!(
            download(b, block, g, 3 * g),
            [&granules[3][..], &granules[2], &fresh].concat()
        );
        b.free_block(block).unwrap();
    });
}

#[test]
fn a_dispatch_and_a_copy_run_over_a_grown_block() {
    on_each_sparse_front(|name, b, growth| {
        let g = growth.granularity;
        let block = reserve(b, g, 4 * g);
        b.resize_block(block, 2 * g).unwrap();
        // 1 KiB of f32 straddling the granule boundary, relu'd into the second granule.
        let len = 256u64;
        let input: Vec<f32> = (0..len).map(|i| i as f32 - 128.0).collect();
        let at = g - 512;
        upload(b, block, at, &f32_bytes(&input));
        let out = g + 4096;
        b.dispatch(
            &Op::Relu { len: len as u32 },
            &[range(block, at, len * 4), range(block, out, len * 4)],
        )
        .unwrap();
        let want: Vec<f32> = input.iter().map(|x| x.max(0.0)).collect();
        assert_eq!(bytes_f32(&download(b, block, out, len * 4)), want, "{name}");
        // Grown after the work above: a copy into the new granule sees its memory.
        b.resize_block(block, 3 * g).unwrap();
        let t = b
            .copy(
                range(block, out, len * 4),
                range(block, 2 * g + 64, len * 4),
            )
            .unwrap();
        b.wait_timeout(t, None).unwrap();
        assert_eq!(
            bytes_f32(&download(b, block, 2 * g + 64, len * 4)),
            want,
            "{name}"
        );
        b.free_block(block).unwrap();
    });
}

#[test]
fn a_reservation_beyond_the_sparse_address_space_is_out_of_memory() {
    on_each_sparse_front(|name, b, growth| {
        let first = reserve(b, 0, growth.max_reserve);
        let desc = BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 0,
            label: "second",
        };
        match b.reserve_block(&desc, growth.granularity) {
            // Address space is shared by every sparse buffer; where it is larger than one
            // buffer may be, the second reservation fits.
            Ok(second) => b.free_block(second).unwrap(),
            Err(e) => assert!(matches!(e, tensormem::Error::OutOfMemory(_)), "{name}: {e}"),
        }
        b.free_block(first).unwrap();
        // Freed address space is usable again.
        let again = reserve(b, growth.granularity, growth.max_reserve);
        b.free_block(again).unwrap();
    });
}

/// Two halves of one granule share an allocation; a copy between them is legal (validation
/// 1.3.239 reports it, and the backend's log drops exactly that message on sparse buffers).
#[test]
fn a_copy_between_halves_of_one_granule() {
    on_each_sparse_front(|name, b, growth| {
        let g = growth.granularity;
        let block = reserve(b, g, 4 * g);
        let data = pattern(30, g / 2);
        upload(b, block, 0, &data);
        let t = b
            .copy(range(block, 0, g / 2), range(block, g / 2, g / 2))
            .unwrap();
        b.wait_timeout(t, None).unwrap();
        assert_eq!(download(b, block, g / 2, g / 2), data, "{name}");
        b.free_block(block).unwrap();
    });
}

/// Granules are sub-allocated from the allocator's large memory objects: growing a block to
/// 128 MiB in 16 steps allocates at most one more `VkDeviceMemory` per 64 MiB (gpu-allocator's
/// block for host-visible memory types, lavapipe's only kind; 256 MiB for device-only ones), not
/// one per granule or per step.
#[test]
fn growth_sub_allocates_granules_from_few_memory_objects() {
    let config = VulkanConfig {
        validation: VulkanBackend::validation_available(),
        ..VulkanConfig::default()
    };
    let Ok(b) = VulkanBackend::new(config) else {
        return;
    };
    let Some(growth) = sparse("memory objects", &b) else {
        return;
    };
    let step = (8u64 << 20).div_ceil(growth.granularity) * growth.granularity;
    let desc = BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size: 0,
        label: "counted",
    };
    let before = b.stats().memory_objects;
    let block = b.reserve_block(&desc, 16 * step).unwrap();
    for i in 1..=16 {
        b.resize_block(block, i * step).unwrap();
    }
    let grown = b.stats().memory_objects - before;
    assert!(
        grown as u64 <= (16 * step).div_ceil(64 << 20),
        "{grown} memory objects for {} bytes in granules of {}",
        16 * step,
        growth.granularity
    );
    b.free_block(block).unwrap();
    assert!(
        b.validation_messages().is_empty(),
        "{:?}",
        b.validation_messages()
    );
}
