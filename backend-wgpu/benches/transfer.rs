//! Transfer throughput and allocation cost on the wgpu device (lavapipe in CI).
//!
//! `upload/<bytes>`: host bytes into a device-local buffer, finished (submitted and waited), via
//! * `memcpy` — host `copy_from_slice` of the same bytes: the ceiling, measured in the same run;
//! * `raw_mapped_staging` — a persistent `MAP_WRITE | COPY_SRC` buffer: map, write, unmap, copy;
//! * `raw_create_buffer_init` — a new buffer with its contents per tensor (wgpu stages it);
//! * `raw_write_buffer` — `queue.write_buffer` (wgpu's internal staging);
//! * `backend_write_queued` — the backend's `write_queued` (= `write_buffer`) + `wait`;
//! * `core_staging_belt` — core's `StagingBelt::upload` over `WgpuBackend` + `wait`;
//! * `zero_copy_write_mapped` — `write_mapped` straight into a host-visible device-local block
//!   (unified memory only).
//!
//! `readback/<bytes>`: device-local bytes into host memory via `memcpy` (ceiling),
//! `raw_mapped_readback` (copy into a `MAP_READ` buffer, wait, map, read), `core_staging_belt`
//! (`StagingBelt::download`) and `zero_copy_read_mapped`.
//!
//! `alloc_10k_tensors`: 10 000 tensors of 256 B .. 64 KiB allocated then freed, from core's
//! `ArenaPool` over `WgpuBackend` vs one `device.create_buffer` per tensor.
//!
//! Run: `cargo bench -p tensormem-wgpu --bench transfer -- --warm-up-time 1 --measurement-time 2`.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a benchmark without its device has nothing to measure"
)]

use std::hint::black_box;
use std::sync::Arc;

/// The criterion harness (its macros generate undocumented items).
mod harness {
    use super::{alloc, readback, upload};
    criterion::criterion_group!(benches, upload, readback, alloc);
}

use criterion::{BenchmarkId, Criterion, Throughput};
use tensormem::{
    ArenaConfig, ArenaPool, Backend, BlockDesc, BlockRange, DevicePool, MemoryKind, StagingBelt,
    StagingConfig,
};
use tensormem_wgpu::{WgpuBackend, WgpuConfig};
use wgpu::util::DeviceExt;

const SIZES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

fn wait_idle(device: &wgpu::Device) {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
}

fn map_blocking(device: &wgpu::Device, buffer: &wgpu::Buffer, mode: wgpu::MapMode) {
    buffer.map_async(mode, .., |r| r.expect("map"));
    wait_idle(device);
}

fn backends() -> (Arc<WgpuBackend>, Arc<WgpuBackend>) {
    let zero_copy = Arc::new(WgpuBackend::new(WgpuConfig::staging(false)).expect("wgpu device"));
    let staging = Arc::new(WgpuBackend::new(WgpuConfig::staging(true)).expect("wgpu device"));
    (zero_copy, staging)
}

fn block(b: &WgpuBackend, kind: MemoryKind, size: u64) -> BlockRange {
    let block = b
        .alloc_block(&BlockDesc {
            kind,
            size,
            label: "bench",
        })
        .expect("block");
    BlockRange {
        block,
        offset: 0,
        size,
    }
}

fn upload(c: &mut Criterion) {
    let (zero_copy, staging) = backends();
    let device = staging.device().clone();
    let queue = staging.queue().clone();
    let belt = StagingBelt::new(staging.clone(), StagingConfig::default()).expect("belt");
    let mut g = c.benchmark_group("upload");
    g.sample_size(10);
    for size in SIZES {
        let data = vec![0x5Au8; size as usize];
        let mut host = vec![0u8; size as usize];
        g.throughput(Throughput::Bytes(size));
        g.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, _| {
            b.iter(|| host.copy_from_slice(black_box(&data)))
        });

        let dst = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("dst"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let stage = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("stage"),
            size,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        g.bench_with_input(
            BenchmarkId::new("raw_mapped_staging", size),
            &size,
            |b, _| {
                b.iter(|| {
                    map_blocking(&device, &stage, wgpu::MapMode::Write);
                    stage
                        .get_mapped_range_mut(..)
                        .expect("view")
                        .copy_from_slice(&data);
                    stage.unmap();
                    let mut e = device.create_command_encoder(&Default::default());
                    e.copy_buffer_to_buffer(&stage, 0, &dst, 0, size);
                    queue.submit([e.finish()]);
                    wait_idle(&device);
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("raw_create_buffer_init", size),
            &size,
            |b, _| {
                b.iter(|| {
                    let buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some("init"),
                        contents: &data,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                    });
                    queue.submit([]);
                    wait_idle(&device);
                    black_box(buf);
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("raw_write_buffer", size), &size, |b, _| {
            b.iter(|| {
                queue.write_buffer(&dst, 0, &data);
                queue.submit([]);
                wait_idle(&device);
            })
        });
        drop((dst, stage));

        let dev = block(&staging, MemoryKind::DeviceLocal, size);
        g.bench_with_input(
            BenchmarkId::new("backend_write_queued", size),
            &size,
            |b, _| {
                b.iter(|| {
                    let t = staging
                        .write_queued(dev, &data)
                        .unwrap()
                        .expect("queued path");
                    staging.wait_timeout(t, None).unwrap();
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("core_staging_belt", size),
            &size,
            |b, _| {
                b.iter(|| {
                    let t = belt.upload(dev, &data).unwrap();
                    staging.wait_timeout(t, None).unwrap();
                })
            },
        );
        staging.free_block(dev.block).unwrap();

        if zero_copy.capabilities().device_host_visible {
            let dev = block(&zero_copy, MemoryKind::DeviceLocal, size);
            g.bench_with_input(
                BenchmarkId::new("zero_copy_write_mapped", size),
                &size,
                |b, _| b.iter(|| zero_copy.write_mapped(dev.block, 0, &data).unwrap()),
            );
            zero_copy.free_block(dev.block).unwrap();
        }
    }
    g.finish();
}

fn readback(c: &mut Criterion) {
    let (zero_copy, staging) = backends();
    let device = staging.device().clone();
    let queue = staging.queue().clone();
    let belt = StagingBelt::new(staging.clone(), StagingConfig::default()).expect("belt");
    let mut g = c.benchmark_group("readback");
    g.sample_size(10);
    for size in SIZES {
        let data = vec![0xA5u8; size as usize];
        let mut out = vec![0u8; size as usize];
        g.throughput(Throughput::Bytes(size));
        g.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, _| {
            b.iter(|| out.copy_from_slice(black_box(&data)))
        });

        let src = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("src"),
            contents: &data,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let rb = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        g.bench_with_input(
            BenchmarkId::new("raw_mapped_readback", size),
            &size,
            |b, _| {
                b.iter(|| {
                    let mut e = device.create_command_encoder(&Default::default());
                    e.copy_buffer_to_buffer(&src, 0, &rb, 0, size);
                    queue.submit([e.finish()]);
                    map_blocking(&device, &rb, wgpu::MapMode::Read);
                    out.copy_from_slice(&rb.get_mapped_range(..).expect("view"));
                    rb.unmap();
                })
            },
        );
        drop((src, rb));

        let dev = block(&staging, MemoryKind::DeviceLocal, size);
        let t = staging.write_queued(dev, &data).unwrap().expect("queued");
        staging.wait_timeout(t, None).unwrap();
        g.bench_with_input(
            BenchmarkId::new("core_staging_belt", size),
            &size,
            |b, _| b.iter(|| belt.download(dev, &mut out).unwrap()),
        );
        staging.free_block(dev.block).unwrap();

        if zero_copy.capabilities().device_host_visible {
            let dev = block(&zero_copy, MemoryKind::DeviceLocal, size);
            zero_copy.write_mapped(dev.block, 0, &data).unwrap();
            g.bench_with_input(
                BenchmarkId::new("zero_copy_read_mapped", size),
                &size,
                |b, _| b.iter(|| zero_copy.read_mapped(dev.block, 0, &mut out).unwrap()),
            );
            zero_copy.free_block(dev.block).unwrap();
        }
        assert_eq!(out, data, "the last readback returned the uploaded bytes");
    }
    g.finish();
}

/// 10 000 tensor sizes of 256 B .. 64 KiB (seeded, fixed), multiples of 4.
fn tensor_sizes() -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..10_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            256 + 4 * (x % (16 << 10))
        })
        .collect()
}

fn alloc(c: &mut Criterion) {
    let (_, staging) = backends();
    let device = staging.device().clone();
    let sizes = tensor_sizes();
    let align = staging.capabilities().binding_align;
    let mut g = c.benchmark_group("alloc_10k_tensors");
    g.sample_size(10);
    g.throughput(Throughput::Elements(sizes.len() as u64));
    let pool = ArenaPool::new(staging.clone(), ArenaConfig::device()).expect("pool");
    g.bench_function("arena_pool", |b| {
        b.iter(|| {
            let allocs: Vec<_> = sizes
                .iter()
                .map(|&s| pool.allocate(s, align, "t").unwrap())
                .collect();
            for a in allocs {
                pool.free(a.handle).unwrap();
            }
        })
    });
    g.bench_function("create_buffer", |b| {
        b.iter(|| {
            let buffers: Vec<_> = sizes
                .iter()
                .map(|&s| {
                    device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("t"),
                        size: s,
                        usage: wgpu::BufferUsages::STORAGE
                            | wgpu::BufferUsages::COPY_SRC
                            | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })
                .collect();
            drop(black_box(buffers));
            device.poll(wgpu::PollType::Poll).expect("poll");
        })
    });
    g.finish();
}

criterion::criterion_main!(harness::benches);
