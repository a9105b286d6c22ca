//! Blocks, copies and tickets on the device: round trips, queued writes and fills, the ticket
//! order, out of memory, stream-ordered, expandable and reserved blocks, and other streams.

use tensormem::backend::BlockDesc;
use tensormem::{Backend, Error, Growable, MemoryKind, Ticket};
use tensormem_cuda::{CudaBackend, CudaDesc, DeviceAlloc, ExpandableDesc};

use crate::{alloc, backend, backend_with, range};

#[test]
fn upload_device_readback_round_trip() {
    let Some(b) = backend() else { return };
    let n = 1 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let up = alloc(&b, MemoryKind::Upload, n as u64);
    let dev = alloc(&b, MemoryKind::DeviceLocal, n as u64);
    let down = alloc(&b, MemoryKind::Readback, n as u64);
    b.write_mapped(up, 0, &data).unwrap();
    let t1 = b
        .copy(range(up, 0, n as u64), range(dev, 0, n as u64))
        .unwrap();
    let t2 = b
        .copy(range(dev, 0, n as u64), range(down, 0, n as u64))
        .unwrap();
    assert!(t2 > t1, "tickets increase");
    b.wait_timeout(t2, None).unwrap();
    assert!(b.completed().unwrap() >= t2);
    let mut out = vec![0u8; n];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert_eq!(out, data);
    // Device memory is not host-visible.
    assert!(matches!(
        b.write_mapped(dev, 0, &[1]),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        b.read_mapped(down, n as u64 - 1, &mut [0, 0]),
        Err(Error::OutOfBounds { .. })
    ));
    for blk in [up, dev, down] {
        b.free_block(blk).unwrap();
    }
    assert!(matches!(
        b.free_block(up),
        Err(Error::UnknownBlock {
            backend: "cuda",
            ..
        })
    ));
}

#[test]
fn queued_write_and_fill_zero() {
    let Some(b) = backend() else { return };
    let dev = alloc(&b, MemoryKind::DeviceLocal, 4096);
    let down = alloc(&b, MemoryKind::Readback, 4096);
    let t = b.write_queued(range(dev, 0, 4096), &[0xAB; 4096]).unwrap();
    assert!(t.is_some());
    b.fill_zero(range(dev, 1024, 1024)).unwrap();
    // Pinned blocks are filled by a kernel through unified addressing.
    b.write_mapped(down, 0, &[0xCD; 4096]).unwrap();
    b.fill_zero(range(down, 0, 512)).unwrap();
    let t = b
        .copy(range(dev, 2048, 2048), range(down, 2048, 2048))
        .unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; 4096];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert!(out[..512].iter().all(|&x| x == 0));
    assert!(out[512..2048].iter().all(|&x| x == 0xCD));
    assert!(out[2048..].iter().all(|&x| x == 0xAB));
    let t = b.copy(range(dev, 0, 2048), range(down, 0, 2048)).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.read_mapped(down, 0, &mut out[..2048]).unwrap();
    assert!(out[..1024].iter().all(|&x| x == 0xAB));
    assert!(out[1024..2048].iter().all(|&x| x == 0));
    assert!(matches!(
        b.write_queued(range(dev, 0, 8), &[1; 4]),
        Err(Error::SizeMismatch { .. })
    ));
    assert_eq!(b.write_queued(range(down, 0, 4), &[1; 4]).unwrap(), None);
    b.free_block(dev).unwrap();
    b.free_block(down).unwrap();
}

#[test]
fn tickets_reject_the_future_and_never_go_back() {
    let Some(b) = backend() else { return };
    let last = b.flush().unwrap();
    assert!(matches!(
        b.wait_timeout(Ticket(last.0 + 10), None),
        Err(Error::UnknownTicket { .. })
    ));
    b.wait_timeout(Ticket::DONE, None).unwrap();
    let dev = alloc(&b, MemoryKind::DeviceLocal, 1 << 20);
    let mut prev = b.completed().unwrap();
    for _ in 0..100 {
        let t = b.fill_zero(range(dev, 0, 1 << 20)).unwrap();
        let c = b.completed().unwrap();
        assert!(c >= prev && c <= t);
        prev = c;
    }
    let t = b.flush().unwrap();
    b.wait_timeout(t, None).unwrap();
    assert_eq!(b.completed().unwrap(), t);
    b.free_block(dev).unwrap();
}

#[test]
fn driver_oom_is_the_retryable_core_oom() {
    let Some(b) = backend() else { return };
    let too_much = b.capabilities().max_block_size;
    let err = b
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: too_much,
            label: "oom",
        })
        .unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err:?}");
    assert!(err.is_retryable());
    // Still usable afterwards.
    let blk = alloc(&b, MemoryKind::DeviceLocal, 1 << 20);
    b.free_block(blk).unwrap();
}

#[test]
fn stream_ordered_blocks_work_like_plain_ones() {
    let Some(b) = backend_with(&CudaDesc {
        device_alloc: DeviceAlloc::StreamOrdered,
        ..CudaDesc::default()
    }) else {
        return;
    };
    for _ in 0..3 {
        let dev = alloc(&b, MemoryKind::DeviceLocal, 8 << 20);
        let down = alloc(&b, MemoryKind::Readback, 4096);
        b.write_queued(range(dev, 0, 4096), &[7; 4096]).unwrap();
        let t = b.copy(range(dev, 0, 4096), range(down, 0, 4096)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut out = vec![0u8; 4096];
        b.read_mapped(down, 0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 7));
        b.free_block(dev).unwrap();
        b.free_block(down).unwrap();
    }
    b.trim_device_pool(0).unwrap();
}

#[test]
fn expandable_block_grows_in_place_and_keeps_contents() {
    let Some(b) = backend() else { return };
    let g = b.vmm_granularity().unwrap();
    let blk = b
        .alloc_expandable_block(&ExpandableDesc {
            reserve: 64 * g,
            initial: g,
            chunk: g,
            label: "expandable",
            holes: false,
        })
        .unwrap();
    let base = b.device_addr(range(blk, 0, g)).unwrap();
    b.write_queued(range(blk, 0, 4096), &[9; 4096]).unwrap();
    assert_eq!(b.grow_block(blk, 10 * g + 1).unwrap(), 11 * g);
    assert_eq!(
        b.device_addr(range(blk, 0, 11 * g)).unwrap(),
        base,
        "grew in place"
    );
    b.fill_zero(range(blk, 10 * g, g)).unwrap();
    let down = alloc(&b, MemoryKind::Readback, 4096);
    let t = b.copy(range(blk, 0, 4096), range(down, 0, 4096)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; 4096];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 9));
    assert!(matches!(
        b.grow_block(blk, 65 * g),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(b.shrink_block(blk, g).unwrap(), g);
    assert!(matches!(
        b.copy(range(blk, g, 4096), range(down, 0, 4096)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        b.grow_block(down, 2 * g),
        Err(Error::Unsupported { .. })
    ));
    b.free_block(blk).unwrap();
    b.free_block(down).unwrap();
}

/// The contract's blocks that grow in place are expandable blocks with a chunk of one granule:
/// growth commits exactly what the pool asks for, each growth is one mapping that a shrink
/// returns whole, and the front checks the sizes reported.
#[test]
fn reserved_blocks_resize_by_granules_through_the_trait() {
    let Some(b) = backend() else { return };
    let Some(growth) = b.extensions().growable.map(|g| g.in_place_growth()) else {
        assert!(b.vmm_granularity().is_err(), "VMM without in-place growth");
        return;
    };
    let g = growth.granularity;
    assert_eq!(g, b.vmm_granularity().unwrap());
    let front = tensormem::Validated::new(std::sync::Arc::new(b));
    let desc = BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size: g,
        label: "reserved",
    };
    let blk = front.reserve_block(&desc, 16 * g).unwrap();
    front.write_queued(range(blk, 0, 4096), &[5; 4096]).unwrap();
    front.resize_block(blk, 5 * g).unwrap();
    let t = front.fill_zero(range(blk, 4 * g, g)).unwrap();
    front.wait_timeout(t, None).unwrap();
    assert!(matches!(
        front.resize_block(blk, 5 * g + 1),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        front.resize_block(blk, 17 * g),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(
        front.resize_block(blk, 3 * g).unwrap(),
        5 * g,
        "a shrink inside one growth keeps that growth whole"
    );
    assert_eq!(front.resize_block(blk, g).unwrap(), g);
    assert!(matches!(
        front.fill_zero(range(blk, g, g)),
        Err(Error::OutOfBounds { .. })
    ));
    front.free_block(blk).unwrap();
}

#[test]
fn other_streams_join_the_timeline() {
    let Some(b) = backend() else { return };
    let other = b.context().new_stream().unwrap();
    let t = b.join_from(&other).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.join_into(&other).unwrap();
    other.synchronize().unwrap();
}

#[test]
fn queued_writes_own_their_bytes_and_recycle_the_ring() {
    let Some(b) = backend() else { return };
    // 64 writes of 64 KiB: four times the 1 MiB pinned ring, issued without waiting.
    const N: u64 = 64;
    const W: u64 = 64 * 1024;
    let dev = alloc(&b, MemoryKind::DeviceLocal, N * W);
    let down = alloc(&b, MemoryKind::Readback, N * W);
    let mut buf = vec![0u8; W as usize];
    let mut full = 0;
    for i in 0..N {
        buf.fill(i as u8 + 1);
        let r = range(dev, i * W, W);
        if b.write_queued(r, &buf).unwrap().is_none() {
            // The ring is full: the pools would stage; here, drain and retry.
            full += 1;
            b.wait_timeout(b.flush().unwrap(), None).unwrap();
            assert!(b.write_queued(r, &buf).unwrap().is_some());
        }
        // The caller reuses its buffer at once: the device must still get `i + 1`.
        buf.fill(0xEE);
    }
    println!("write_queued: the ring was full {full} times in {N} writes");
    let t = b.copy(range(dev, 0, N * W), range(down, 0, N * W)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; (N * W) as usize];
    b.read_mapped(down, 0, &mut out).unwrap();
    for (i, chunk) in out.chunks(W as usize).enumerate() {
        assert!(
            chunk.iter().all(|&x| x == i as u8 + 1),
            "chunk {i} was not written intact"
        );
    }
    b.free_block(dev).unwrap();
    b.free_block(down).unwrap();
}

#[test]
fn the_per_thread_default_stream_cannot_be_adopted() {
    let Some(b) = backend() else { return };
    let err = CudaBackend::adopt(b.context().per_thread_stream(), &CudaDesc::default())
        .expect_err("the per-thread default stream must be refused");
    assert!(
        matches!(err, Error::Unsupported { ref what, .. } if what.contains("PER_THREAD")),
        "{err:?}"
    );
    let own = b.context().new_stream().unwrap();
    let adopted = CudaBackend::adopt(own, &CudaDesc::default()).unwrap();
    let dev = alloc(&adopted, MemoryKind::DeviceLocal, 4096);
    adopted
        .wait_timeout(adopted.fill_zero(range(dev, 0, 4096)).unwrap(), None)
        .unwrap();
    adopted.free_block(dev).unwrap();
}
