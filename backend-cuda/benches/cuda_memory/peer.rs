//! `peer`: copies between two CUDA backends on one GPU through a device set, on each path the
//! set can take, next to one backend's own device-to-device copy (the baseline). Throughput
//! counts the bytes moved once.
//!
//! * `shared-device`: two backends on GPU 0 with direct copies on (`cuMemcpyAsync` on the
//!   destination's stream, ordered by events against both streams);
//! * `staged`: the same pair with [`tensormem_cuda::CudaDesc::direct_copies`] off, so the set
//!   stages through host memory in chunks;
//! * `peer-to-peer` between two GPUs when the machine has two with peer access.

use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use tensormem::devices::TransferPath;
use tensormem::{Backend, DType, DeviceId, DeviceSet, MemoryKind, RuntimeConfig, Tensor};
use tensormem_cuda::{CudaBackend, CudaDesc};

use crate::{MIB, alloc, note, range, record};

const SIZE: u64 = 64 * MIB;

/// A set of two backends, devices `a` and `b`, with direct copies `direct`; `None` when the
/// second device is missing.
fn pair(a: usize, b: usize, direct: bool) -> Option<DeviceSet> {
    let open = |ordinal| {
        CudaBackend::new(&CudaDesc {
            ordinal,
            direct_copies: direct,
            ..CudaDesc::default()
        })
        .ok()
        .map(|be| Arc::new(be) as Arc<dyn Backend>)
    };
    let backends = vec![open(a)?, open(b)?];
    Some(DeviceSet::new(backends, RuntimeConfig::default()).unwrap())
}

/// Times `set.copy` from device 0 to device 1 and checks the path the set counted.
fn bench_set(c: &mut Criterion, name: &'static str, set: &DeviceSet, path: TransferPath) {
    let n = SIZE as usize;
    let x: Tensor = set.alloc(DeviceId(0), DType::U8, &[n], "x").unwrap();
    let y: Tensor = set.alloc(DeviceId(1), DType::U8, &[n], "y").unwrap();
    set.upload(&x, &vec![9u8; n]).unwrap();
    let mut g = c.benchmark_group("peer");
    g.throughput(Throughput::Bytes(SIZE));
    g.bench_function(name, |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let tk = set.copy(&x, &y).unwrap();
                set.device(DeviceId(1)).unwrap().backend().wait(tk).unwrap();
            }
            let e = t.elapsed();
            record("peer", name, e, iters, SIZE);
            e
        })
    });
    g.finish();
    let stats = set.transfer_stats();
    let on_path = stats.bytes(path);
    let total: u64 = stats.paths.iter().map(|p| p.2).sum();
    note(
        "peer",
        name,
        format!(
            "path {}: {} of {} bytes copied",
            path.name(),
            on_path,
            total
        ),
    );
    assert_eq!(on_path, total, "{name}: every copy on {}", path.name());
    assert_eq!(set.download::<u8>(&y).unwrap()[n - 1], 9);
    set.free(x).unwrap();
    set.free(y).unwrap();
}

pub(crate) fn bench_peer(c: &mut Criterion, plain: &CudaBackend) {
    let (x, y) = (
        alloc(plain, MemoryKind::DeviceLocal, SIZE),
        alloc(plain, MemoryKind::DeviceLocal, SIZE),
    );
    let mut g = c.benchmark_group("peer");
    g.throughput(Throughput::Bytes(SIZE));
    g.bench_function("d2d one backend (baseline)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let tk = plain.copy(range(x, 0, SIZE), range(y, 0, SIZE)).unwrap();
                plain.wait_timeout(tk, None).unwrap();
            }
            let e = t.elapsed();
            record("peer", "d2d one backend (baseline)", e, iters, SIZE);
            e
        })
    });
    g.finish();
    for blk in [x, y] {
        plain.free_block(blk).unwrap();
    }
    if let Some(set) = pair(0, 0, true) {
        bench_set(
            c,
            "two backends, shared-device",
            &set,
            TransferPath::SharedDevice,
        );
    }
    if let Some(set) = pair(0, 0, false) {
        bench_set(c, "two backends, staged", &set, TransferPath::Staged);
    }
    if cudarc::driver::CudaContext::device_count().unwrap_or(1) >= 2
        && let Some(set) = pair(0, 1, true)
    {
        let peer = set.runtimes()[1]
            .backend()
            .capabilities()
            .device_name
            .clone();
        bench_set(c, "two GPUs, direct", &set, direct_path(&set));
        println!("peer: second GPU {peer}");
    }
}

/// The path a copy between the set's two GPUs takes: peer-to-peer when the driver allows it.
fn direct_path(set: &DeviceSet) -> TransferPath {
    let probe = set.alloc(DeviceId(0), DType::U8, &[4096], "probe").unwrap();
    let to = set.transfer(&probe, DeviceId(1), "probe").unwrap();
    let path = set
        .transfer_stats()
        .paths
        .first()
        .map_or(TransferPath::Staged, |p| p.0);
    set.free(probe).unwrap();
    set.free(to).unwrap();
    path
}
