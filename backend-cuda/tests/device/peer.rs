//! Copies between two CUDA backends: two backends on one GPU (what the `cuda-2dev` conformance
//! target builds) copy device to device, a device set reports the path, and with direct copies
//! off the set stages through host memory.

use std::sync::Arc;

use tensormem::devices::TransferPath;
use tensormem::{
    Backend, DType, DeviceId, DeviceSet, MemoryKind, Peer, PeerPath, PeerRanges, RuntimeConfig,
    Ticket,
};
use tensormem_cuda::{CudaBackend, CudaDesc};

use crate::{alloc, backend, backend_with, range};

/// `n` bytes of a pattern in a new device block of `b`.
fn filled(b: &CudaBackend, n: u64, seed: u8) -> (tensormem::BlockId, Vec<u8>) {
    let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
    let dev = alloc(b, MemoryKind::DeviceLocal, n);
    let up = alloc(b, MemoryKind::Upload, n);
    b.write_mapped(up, 0, &data).unwrap();
    let t = b.copy(range(up, 0, n), range(dev, 0, n)).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.free_block(up).unwrap();
    (dev, data)
}

fn read(b: &CudaBackend, dev: tensormem::BlockId, n: u64, after: Ticket) -> Vec<u8> {
    b.wait_timeout(after, None).unwrap();
    let down = alloc(b, MemoryKind::Readback, n);
    let t = b.copy(range(dev, 0, n), range(down, 0, n)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; n as usize];
    b.read_mapped(down, 0, &mut out).unwrap();
    b.free_block(down).unwrap();
    out
}

#[test]
fn two_backends_on_one_gpu_copy_device_to_device() {
    let (Some(a), Some(b)) = (backend(), backend()) else {
        return;
    };
    let n = 3 << 20;
    let (src, data) = filled(&a, n, 7);
    let dst = alloc(&b, MemoryKind::DeviceLocal, n);
    let copied = a
        .copy_to_peer(&b, PeerRanges::new(range(src, 0, n), range(dst, 0, n)))
        .unwrap()
        .expect("two backends on one GPU have a direct path");
    assert_eq!(copied.path, PeerPath::SharedDevice);
    assert_eq!(read(&b, dst, n, copied.dst_ticket), data);
    // The source's ticket completes after the copy: the source may then be reused.
    a.wait_timeout(copied.src_ticket, None).unwrap();
    // Back the other way, into an offset, after both sides did more work.
    let t = a.fill_zero(range(src, 0, n)).unwrap();
    let back = b
        .copy_to_peer(
            &a,
            PeerRanges::new(range(dst, 4096, 4096), range(src, 8192, 4096)),
        )
        .unwrap()
        .unwrap();
    assert!(
        back.dst_ticket > t,
        "ordered after the destination's earlier fill"
    );
    let got = read(&a, src, n, back.dst_ticket);
    assert!(got[..8192].iter().all(|&v| v == 0));
    assert_eq!(&got[8192..12288], &data[4096..8192]);
    assert!(got[12288..].iter().all(|&v| v == 0));
    for (be, blk) in [(&a, src), (&b, dst)] {
        be.free_block(blk).unwrap();
    }
}

#[test]
fn direct_copies_can_be_turned_off() {
    let off = CudaDesc {
        direct_copies: false,
        ..CudaDesc::default()
    };
    let (Some(a), Some(b)) = (backend_with(&off), backend()) else {
        return;
    };
    let (src, _) = filled(&a, 4096, 1);
    let dst = alloc(&b, MemoryKind::DeviceLocal, 4096);
    assert_eq!(
        a.copy_to_peer(
            &b,
            PeerRanges::new(range(src, 0, 4096), range(dst, 0, 4096))
        )
        .unwrap(),
        None
    );
    assert_eq!(
        b.copy_to_peer(
            &a,
            PeerRanges::new(range(dst, 0, 4096), range(src, 0, 4096))
        )
        .unwrap(),
        None
    );
    a.free_block(src).unwrap();
    b.free_block(dst).unwrap();
}

/// A set of two backends on one GPU: the copy goes device to device and the set counts it on
/// that path; with direct copies off the same copy is staged. Both arrive intact.
#[test]
fn a_device_set_reports_the_path_each_copy_took() {
    for direct in [true, false] {
        let desc = CudaDesc {
            direct_copies: direct,
            ..CudaDesc::default()
        };
        let (Some(a), Some(b)) = (backend_with(&desc), backend_with(&desc)) else {
            return;
        };
        let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(a), Arc::new(b)];
        let set = DeviceSet::new(backends, RuntimeConfig::default()).unwrap();
        let n = 1_000_003usize;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let x = set.alloc(DeviceId(0), DType::U8, &[n], "x").unwrap();
        set.upload(&x, &data).unwrap();
        let y = set.transfer(&x, DeviceId(1), "y").unwrap();
        assert_eq!(set.download::<u8>(&y).unwrap(), data, "direct: {direct}");
        let stats = set.transfer_stats();
        let (taken, other) = if direct {
            (TransferPath::SharedDevice, TransferPath::Staged)
        } else {
            (TransferPath::Staged, TransferPath::SharedDevice)
        };
        assert_eq!(stats.bytes(taken), n as u64, "{stats:?}");
        assert_eq!(stats.bytes(other), 0, "{stats:?}");
        set.free(x).unwrap();
        set.free(y).unwrap();
    }
}

#[test]
fn two_gpus_copy_peer_to_peer_where_the_driver_allows() {
    let Some(a) = backend() else { return };
    if cudarc::driver::CudaContext::device_count().unwrap_or(1) < 2 {
        println!("one GPU: peer-to-peer between devices not tested");
        return;
    }
    let Some(b) = backend_with(&CudaDesc {
        ordinal: 1,
        ..CudaDesc::default()
    }) else {
        return;
    };
    let n = 1 << 20;
    let (src, data) = filled(&a, n, 3);
    let dst = alloc(&b, MemoryKind::DeviceLocal, n);
    match a
        .copy_to_peer(&b, PeerRanges::new(range(src, 0, n), range(dst, 0, n)))
        .unwrap()
    {
        Some(c) => {
            assert_eq!(c.path, PeerPath::PeerToPeer);
            assert_eq!(read(&b, dst, n, c.dst_ticket), data);
            a.wait_timeout(c.src_ticket, None).unwrap();
        }
        None => println!("no peer access between GPU 0 and 1: the set stages"),
    }
    a.free_block(src).unwrap();
    b.free_block(dst).unwrap();
}
