//! `managed` and `managed-host`: what managed memory costs next to device memory.
//!
//! * `managed`: a kernel (`relu`, reading and writing `size` bytes) over device memory (the
//!   baseline), over managed memory prefetched to the device first (the prefetch is timed), over
//!   managed memory left on the host (the kernel reaches it over the link, or faults it over), and over managed memory
//!   already resident. Before every iteration of the non-resident variants the pages are sent
//!   back to the host, untimed.
//! * `managed-host`: the host reading `size` bytes: from a pinned readback block (the baseline),
//!   from managed memory resident on the device (the host faults the pages back), and from
//!   managed memory prefetched to the host first (the prefetch is timed).

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use tensormem::{Backend, Managed, MemoryKind, Op, Residence};
use tensormem_cuda::CudaBackend;

use crate::{MIB, alloc, range, record};

/// Sends `r` to `to` and waits, untimed.
fn place(b: &CudaBackend, r: tensormem::BlockRange, to: Residence) {
    let t = b.prefetch(r, to).unwrap();
    b.wait_timeout(t, None).unwrap();
}

/// One variant of `group`: `run` does one iteration and returns its timed part.
fn variant(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    name: &str,
    bytes: u64,
    mut run: impl FnMut() -> Duration,
) {
    g.bench_function(name, |bn| {
        bn.iter_custom(|iters| {
            let mut e = Duration::ZERO;
            for _ in 0..iters {
                e += run();
            }
            record(group, name, e, iters, bytes);
            e
        })
    });
}

pub(crate) fn bench_managed(c: &mut Criterion, b: &CudaBackend) {
    if !b.managed_memory().supported() {
        println!("managed: skipped, the device has no concurrent managed access");
        return;
    }
    let size = (b.capabilities().budget.unwrap_or(0) / 16).clamp(16 * MIB, 128 * MIB);
    let len = u32::try_from(size / 4).unwrap();
    let relu = Op::Relu { len };
    let dev = alloc(b, MemoryKind::DeviceLocal, 2 * size);
    let m = alloc(b, MemoryKind::Managed, 2 * size);
    let (d_in, d_out) = (range(dev, 0, size), range(dev, size, size));
    let (m_in, m_out) = (range(m, 0, size), range(m, size, size));
    let whole = range(m, 0, 2 * size);
    b.write_mapped(m, 0, &vec![1u8; (2 * size) as usize])
        .unwrap();
    b.fill_zero(range(dev, 0, 2 * size)).unwrap();

    let mut g = c.benchmark_group("managed");
    g.throughput(Throughput::Bytes(2 * size));
    variant(
        &mut g,
        "managed",
        "device memory (baseline)",
        2 * size,
        || {
            let t = Instant::now();
            let tk = b.dispatch(&relu, &[d_in, d_out]).unwrap();
            b.wait_timeout(tk, None).unwrap();
            t.elapsed()
        },
    );
    variant(
        &mut g,
        "managed",
        "managed, prefetched to device",
        2 * size,
        || {
            place(b, whole, Residence::Host);
            let t = Instant::now();
            b.prefetch(whole, Residence::Device).unwrap();
            let tk = b.dispatch(&relu, &[m_in, m_out]).unwrap();
            b.wait_timeout(tk, None).unwrap();
            t.elapsed()
        },
    );
    variant(
        &mut g,
        "managed",
        "managed on host, no prefetch",
        2 * size,
        || {
            place(b, whole, Residence::Host);
            let t = Instant::now();
            let tk = b.dispatch(&relu, &[m_in, m_out]).unwrap();
            b.wait_timeout(tk, None).unwrap();
            t.elapsed()
        },
    );
    place(b, whole, Residence::Device);
    variant(
        &mut g,
        "managed",
        "managed, resident on device",
        2 * size,
        || {
            let t = Instant::now();
            let tk = b.dispatch(&relu, &[m_in, m_out]).unwrap();
            b.wait_timeout(tk, None).unwrap();
            t.elapsed()
        },
    );
    g.finish();

    let down = alloc(b, MemoryKind::Readback, size);
    let mut host = vec![0u8; size as usize];
    let mut g = c.benchmark_group("managed-host");
    g.throughput(Throughput::Bytes(size));
    variant(
        &mut g,
        "managed-host",
        "pinned readback (baseline)",
        size,
        || {
            let t = Instant::now();
            b.read_mapped(down, 0, &mut host).unwrap();
            t.elapsed()
        },
    );
    variant(
        &mut g,
        "managed-host",
        "managed on device, host faults",
        size,
        || {
            place(b, m_in, Residence::Device);
            let t = Instant::now();
            b.read_mapped(m, 0, &mut host).unwrap();
            t.elapsed()
        },
    );
    variant(
        &mut g,
        "managed-host",
        "managed, prefetched to host",
        size,
        || {
            place(b, m_in, Residence::Device);
            let t = Instant::now();
            place(b, m_in, Residence::Host);
            b.read_mapped(m, 0, &mut host).unwrap();
            t.elapsed()
        },
    );
    g.finish();
    for blk in [dev, m, down] {
        b.free_block(blk).unwrap();
    }
}
