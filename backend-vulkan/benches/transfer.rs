//! Transfer and allocation benchmarks of the Vulkan backend (the same groups as the wgpu backend's
//! `transfer` bench, so the two can be compared on one device).
//!
//! * `upload/*`, `readback/*`: bytes per second from 4 KiB to 256 MiB, through a mapped staging
//!   block plus `vkCmdCopyBuffer` (the discrete-GPU path, forced with `force_staging`) versus a
//!   direct mapped write/read of device memory (zero-copy), with host `memcpy` of the same bytes
//!   as the ceiling in the same run.
//! * `alloc_10k_tensors/*`: 10 000 tensor allocations and frees from the core arena
//!   (`tensormem::pool::ArenaPool`, sub-allocation in warm blocks) versus one `VkBuffer` plus one
//!   gpu-allocator allocation per tensor (`alloc_block`/`free_block`).
//!
//! Run: `cargo bench -p tensormem-vulkan --bench transfer` (needs a Vulkan driver; prints a
//! skip notice otherwise). Validation is off.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    reason = "a benchmark fails loudly on any error rather than measuring a failed call"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensormem::pool::{ArenaConfig, ArenaPool, DevicePool};
use tensormem::{Backend, BlockDesc, BlockId, BlockRange, MemoryKind};
use tensormem_vulkan::{VulkanBackend, VulkanConfig};

const SIZES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];
const TENSORS: usize = 10_000;

fn backend(force_staging: bool) -> Option<VulkanBackend> {
    match VulkanBackend::new(VulkanConfig {
        force_staging,
        ..VulkanConfig::default()
    }) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIPPED: Vulkan unavailable: {e}");
            None
        }
    }
}

fn block(b: &VulkanBackend, kind: MemoryKind, size: u64) -> BlockId {
    b.alloc_block(&BlockDesc {
        kind,
        size,
        label: "bench",
    })
    .unwrap_or_else(|e| panic!("bench block of {size} bytes: {e}"))
}

fn transfers(c: &mut Criterion) {
    let (Some(zero), Some(staged)) = (backend(false), backend(true)) else {
        return;
    };
    for upload in [true, false] {
        let mut group = c.benchmark_group(if upload { "upload" } else { "readback" });
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for size in SIZES {
            group.throughput(Throughput::Bytes(size));
            let host_src = vec![1u8; size as usize];
            let mut host_dst = vec![0u8; size as usize];
            group.bench_with_input(BenchmarkId::new("host_memcpy", size), &size, |bench, _| {
                bench.iter(|| {
                    host_dst.copy_from_slice(black_box(&host_src));
                    black_box(&mut host_dst);
                })
            });
            let dev = block(&staged, MemoryKind::DeviceLocal, size);
            let stage = block(
                &staged,
                if upload {
                    MemoryKind::Upload
                } else {
                    MemoryKind::Readback
                },
                size,
            );
            group.bench_with_input(BenchmarkId::new("staging_copy", size), &size, |bench, _| {
                bench.iter(|| {
                    if upload {
                        staged.write_mapped(stage, 0, &host_src).unwrap();
                        let t = staged
                            .copy(BlockRange::whole(stage, size), BlockRange::whole(dev, size));
                        staged.wait_timeout(t.unwrap(), None).unwrap();
                    } else {
                        let t = staged
                            .copy(BlockRange::whole(dev, size), BlockRange::whole(stage, size));
                        staged.wait_timeout(t.unwrap(), None).unwrap();
                        staged.read_mapped(stage, 0, &mut host_dst).unwrap();
                    }
                    black_box(&mut host_dst);
                })
            });
            staged.free_block(dev).unwrap();
            staged.free_block(stage).unwrap();
            if zero.capabilities().device_host_visible {
                let dev = block(&zero, MemoryKind::DeviceLocal, size);
                group.bench_with_input(BenchmarkId::new("zero_copy", size), &size, |bench, _| {
                    bench.iter(|| {
                        if upload {
                            zero.write_mapped(dev, 0, &host_src).unwrap();
                        } else {
                            // The contract: wait for the range's work, then read it mapped.
                            let t = zero.flush().unwrap();
                            zero.wait_timeout(t, None).unwrap();
                            zero.read_mapped(dev, 0, &mut host_dst).unwrap();
                        }
                        black_box(&mut host_dst);
                    })
                });
                zero.free_block(dev).unwrap();
            }
        }
        group.finish();
    }
}

/// Tensor sizes of a transformer-like mix: 256 B to 16 KiB.
fn tensor_size(i: usize) -> u64 {
    ((i * 97) % 64 + 1) as u64 * 256
}

fn allocation(c: &mut Criterion) {
    let Some(b) = backend(false) else { return };
    let b: Arc<VulkanBackend> = Arc::new(b);
    let mut group = c.benchmark_group("alloc_10k_tensors");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(TENSORS as u64));
    let pool = match ArenaPool::new(b.clone(), ArenaConfig::device()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: arena pool: {e}");
            return;
        }
    };
    let mut handles = Vec::with_capacity(TENSORS);
    group.bench_function("core_arena", |bench| {
        bench.iter(|| {
            for i in 0..TENSORS {
                handles.push(pool.allocate(tensor_size(i), 256, "t").unwrap().handle);
            }
            for h in handles.drain(..) {
                pool.free(h).unwrap();
            }
        })
    });
    let mut blocks = Vec::with_capacity(TENSORS);
    group.bench_function("vk_buffer_per_tensor", |bench| {
        bench.iter(|| {
            for i in 0..TENSORS {
                blocks.push(block(&b, MemoryKind::DeviceLocal, tensor_size(i)));
            }
            for id in blocks.drain(..) {
                b.free_block(id).unwrap();
            }
        })
    });
    group.finish();
}

criterion_group!(benches, transfers, allocation);
criterion_main!(benches);
