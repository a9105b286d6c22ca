//! Blocks: allocation and free of each kind, mapped round trips (aligned and not), zero-copy
//! access, device copies (also within one block), fills, queued writes and their ordering.

use tensormem::{Backend, Error, MemoryKind};

use super::{alloc, bytes, download, each_config, range, upload};

#[test]
fn alloc_and_free_each_kind() {
    each_config(|b| {
        let before = b.live_blocks();
        let ids: Vec<_> = [
            MemoryKind::DeviceLocal,
            MemoryKind::Upload,
            MemoryKind::Readback,
        ]
        .into_iter()
        .map(|kind| alloc(b, kind, 4096))
        .collect();
        assert_eq!(b.live_blocks(), before + 3);
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 3, "block ids are unique");
        for id in ids {
            b.free_block(id).unwrap();
        }
        assert_eq!(b.live_blocks(), before);
    });
}

#[test]
fn odd_block_size_is_usable_to_its_end() {
    each_config(|b| {
        // 4099 bytes: the buffer is rounded up to 4104 internally; ranges stop at 4099.
        let up = alloc(b, MemoryKind::Upload, 4099);
        let data = bytes(1, 3);
        b.write_mapped(up, 4096, &data).unwrap();
        let err = b.write_mapped(up, 4096, &bytes(1, 4)).unwrap_err();
        assert!(
            matches!(err, Error::OutOfBounds { limit: 4099, .. }),
            "{err}"
        );
        let mut back = vec![0; 3];
        b.read_mapped(up, 4096, &mut back).unwrap();
        assert_eq!(back, data);
        b.free_block(up).unwrap();
    });
}

#[test]
fn staged_round_trip_many_sizes_and_offsets() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 20);
        for (i, (offset, size)) in [
            (0u64, 4u64),
            (4, 8),
            (12, 1020),
            (64, 4096),
            (4100, 65536),
            (0, 1 << 20),
        ]
        .into_iter()
        .enumerate()
        {
            let data = bytes(i as u64, size as usize);
            upload(b, range(dev, offset, size), &data);
            assert_eq!(
                download(b, range(dev, offset, size)),
                data,
                "offset {offset} size {size}"
            );
        }
        b.free_block(dev).unwrap();
    });
}

#[test]
fn mapped_access_at_offsets_not_multiple_of_map_alignment() {
    each_config(|b| {
        let up = alloc(b, MemoryKind::Upload, 256);
        let rb = alloc(b, MemoryKind::Readback, 256);
        let data = bytes(7, 256);
        // Several writes into one mapping, at 4-aligned but not 8-aligned offsets.
        for offset in [4usize, 12, 100, 0, 252] {
            let end = (offset + 36).min(256);
            b.write_mapped(up, offset as u64, &data[offset..end])
                .unwrap();
        }
        b.write_mapped(up, 0, &data).unwrap();
        let t = b.copy(range(up, 0, 256), range(rb, 0, 256)).unwrap();
        b.wait_timeout(t, None).unwrap();
        for offset in [4usize, 12, 20, 252] {
            let mut out = vec![0u8; 256 - offset];
            b.read_mapped(rb, offset as u64, &mut out).unwrap();
            assert_eq!(out, data[offset..], "offset {offset}");
        }
        b.free_block(up).unwrap();
        b.free_block(rb).unwrap();
    });
}

#[test]
fn device_local_host_access_follows_capability() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1024);
        let data = bytes(3, 512);
        if b.capabilities().device_host_visible {
            b.write_mapped(dev, 512, &data).unwrap();
            let mut out = vec![0; 512];
            b.read_mapped(dev, 512, &mut out).unwrap();
            assert_eq!(out, data);
            // Zero-copy writes are seen by device copies and vice versa.
            assert_eq!(download(b, range(dev, 512, 512)), data);
            let other = bytes(4, 512);
            upload(b, range(dev, 0, 512), &other);
            b.read_mapped(dev, 0, &mut out).unwrap();
            assert_eq!(out, other);
        } else {
            let err = b.write_mapped(dev, 0, &data).unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err}");
            let mut out = vec![0; 4];
            let err = b.read_mapped(dev, 0, &mut out).unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        }
        b.free_block(dev).unwrap();
    });
}

#[test]
fn upload_blocks_read_back_and_readback_blocks_written() {
    // WebGPU cannot map these directions; the backend emulates them.
    each_config(|b| {
        let up = alloc(b, MemoryKind::Upload, 64);
        let data = bytes(9, 64);
        b.write_mapped(up, 0, &data).unwrap();
        let mut out = vec![0; 60];
        b.read_mapped(up, 4, &mut out).unwrap();
        assert_eq!(out, data[4..]);
        // The upload block is still writable afterwards.
        b.write_mapped(up, 0, &[1, 2, 3, 4]).unwrap();
        let mut head = [0u8; 4];
        b.read_mapped(up, 0, &mut head).unwrap();
        assert_eq!(head, [1, 2, 3, 4]);

        let rb = alloc(b, MemoryKind::Readback, 64);
        b.write_mapped(rb, 8, &data[..16]).unwrap();
        let mut out = vec![0; 16];
        b.read_mapped(rb, 8, &mut out).unwrap();
        assert_eq!(out, data[..16]);
        b.free_block(up).unwrap();
        b.free_block(rb).unwrap();
    });
}

#[test]
fn copy_within_one_block_including_overlap() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1024);
        let data = bytes(11, 1024);
        upload(b, range(dev, 0, 1024), &data);
        // Disjoint ranges of one block.
        b.copy(range(dev, 0, 256), range(dev, 512, 256)).unwrap();
        // Overlapping: memmove semantics.
        let t = b.copy(range(dev, 0, 512), range(dev, 4, 512)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut expect = data.clone();
        expect.copy_within(0..256, 512);
        expect.copy_within(0..512, 4);
        assert_eq!(download(b, range(dev, 0, 1024)), expect);
        b.free_block(dev).unwrap();
    });
}

#[test]
fn fill_zero_clears_only_its_range() {
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 4096);
        let data = bytes(5, 4096);
        upload(b, range(dev, 0, 4096), &data);
        let t = b.fill_zero(range(dev, 1024, 2048)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let got = download(b, range(dev, 0, 4096));
        assert_eq!(got[..1024], data[..1024]);
        assert!(got[1024..3072].iter().all(|&x| x == 0));
        assert_eq!(got[3072..], data[3072..]);
        b.free_block(dev).unwrap();
    });
}

#[test]
fn queued_write_keeps_program_order() {
    each_config(|b| {
        let a = alloc(b, MemoryKind::DeviceLocal, 256);
        let before_copy = alloc(b, MemoryKind::DeviceLocal, 256);
        let after_copy = alloc(b, MemoryKind::DeviceLocal, 256);
        let old = bytes(1, 256);
        let new = bytes(2, 256);
        let t0 = b.write_queued(range(a, 0, 256), &old).unwrap().unwrap();
        // Enqueued before the second write: must see `old` although wgpu runs queued writes at
        // the start of the next submission.
        let t1 = b
            .copy(range(a, 0, 256), range(before_copy, 0, 256))
            .unwrap();
        let t2 = b.write_queued(range(a, 0, 256), &new).unwrap().unwrap();
        let t3 = b.copy(range(a, 0, 256), range(after_copy, 0, 256)).unwrap();
        assert!(
            t0 <= t1 && t1 < t2 && t2 <= t3,
            "{t0:?} {t1:?} {t2:?} {t3:?}"
        );
        b.wait_timeout(t3, None).unwrap();
        assert_eq!(download(b, range(before_copy, 0, 256)), old);
        assert_eq!(download(b, range(after_copy, 0, 256)), new);
        assert_eq!(download(b, range(a, 0, 256)), new);
        for id in [a, before_copy, after_copy] {
            b.free_block(id).unwrap();
        }
    });
}

#[test]
fn upload_block_reused_after_its_copy() {
    // A belt pattern: write, copy, write the same block again; the second write must wait
    // for the copy (wgpu maps whole buffers) and the first copy must see the first data.
    each_config(|b| {
        let up = alloc(b, MemoryKind::Upload, 128);
        let dev = alloc(b, MemoryKind::DeviceLocal, 256);
        let first = bytes(21, 128);
        let second = bytes(22, 128);
        b.write_mapped(up, 0, &first).unwrap();
        b.copy(range(up, 0, 128), range(dev, 0, 128)).unwrap();
        b.write_mapped(up, 0, &second).unwrap();
        let t = b.copy(range(up, 0, 128), range(dev, 128, 128)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let got = download(b, range(dev, 0, 256));
        assert_eq!(got[..128], first[..]);
        assert_eq!(got[128..], second[..]);
        b.free_block(up).unwrap();
        b.free_block(dev).unwrap();
    });
}

#[test]
fn random_transfers_under_pressure() {
    // Many uploads and readbacks of random sizes through few small staging blocks, every
    // byte verified.
    each_config(|b| {
        let dev = alloc(b, MemoryKind::DeviceLocal, 1 << 16);
        let ups: Vec<_> = (0..3).map(|_| alloc(b, MemoryKind::Upload, 4096)).collect();
        let rbs: Vec<_> = (0..3)
            .map(|_| alloc(b, MemoryKind::Readback, 4096))
            .collect();
        let mut shadow = vec![0u8; 1 << 16];
        upload(b, range(dev, 0, 1 << 16), &shadow);
        let mut rng = 12345u64;
        let mut next = |m: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % m
        };
        for i in 0..300 {
            let size = 4 * (1 + next(1024));
            let offset = 4 * next(((1 << 16) - size) / 4 + 1);
            let slot = (i % 3) as usize;
            if next(2) == 0 {
                let data = bytes(i, size as usize);
                b.write_mapped(ups[slot], 0, &data).unwrap();
                b.copy(range(ups[slot], 0, size), range(dev, offset, size))
                    .unwrap();
                shadow[offset as usize..(offset + size) as usize].copy_from_slice(&data);
            } else {
                let t = b
                    .copy(range(dev, offset, size), range(rbs[slot], 0, size))
                    .unwrap();
                b.wait_timeout(t, None).unwrap();
                let mut out = vec![0; size as usize];
                b.read_mapped(rbs[slot], 0, &mut out).unwrap();
                assert_eq!(
                    out,
                    shadow[offset as usize..(offset + size) as usize],
                    "step {i}"
                );
            }
        }
        assert_eq!(download(b, range(dev, 0, 1 << 16)), shadow);
        for id in ups.into_iter().chain(rbs).chain([dev]) {
            b.free_block(id).unwrap();
        }
    });
}

#[test]
fn adopted_device_works() {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .unwrap();
    let (device, queue) =
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).unwrap();
    let b = tensormem_wgpu::WgpuBackend::from_device(
        device,
        queue,
        tensormem_wgpu::WgpuConfig::default(),
    );
    // Without MAPPABLE_PRIMARY_BUFFERS requested, the adopted device takes the staging path.
    assert!(!b.capabilities().device_host_visible);
    let dev = alloc(&b, MemoryKind::DeviceLocal, 1024);
    let data = bytes(8, 1024);
    upload(&b, range(dev, 0, 1024), &data);
    assert_eq!(download(&b, range(dev, 0, 1024)), data);
    b.free_block(dev).unwrap();
}
