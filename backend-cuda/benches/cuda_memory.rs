//! CUDA memory benchmarks: the measurements behind the backend's defaults.
//!
//! * `transfer`: host→device and device→host of 64 MiB from pinned blocks (the staging path) vs
//!   pageable `Vec`s (`cuMemcpyHtoD` / `cuMemcpyDtoH`), with a host `memcpy` of the same size as
//!   the trivial baseline. Throughput in GB/s.
//! * `alloc`: one step of 256 tensors (log-uniform 4 KiB .. 8 MiB, fixed seed) allocated and freed:
//!   `cuMemAlloc` per tensor, `cuMemAllocFromPoolAsync` per tensor, and an arena (one
//!   pre-allocated block carved by offset arithmetic, as a planned step does: the baseline).
//! * `expandable`: 24 steps whose live arena size wanders between 64 MiB and 2 GiB; each step
//!   touches its bytes (`fill_zero`) and waits. The plain arena grows by allocating a larger block,
//!   copying the live bytes and freeing the old one; the expandable block maps each growth in
//!   place as one allocation and unmaps whole growths when the step shrinks. Also reports peak
//!   and mean reserved bytes.
//!
//! * `hbm`: a device-to-device copy of up to 1 GiB, bytes read plus written, next to the HBM peak
//!   computed from the device's memory clock and bus width (printed after the table).
//!
//! * `managed` and `managed-host` (`cuda_memory/managed.rs`): a kernel over device memory vs
//!   managed memory prefetched, faulted over, or resident; the host reading managed memory
//!   resident on the device vs prefetched to the host vs a pinned block.
//! * `peer` (`cuda_memory/peer.rs`): a device set's copy between two backends on one GPU, direct
//!   vs staged, next to one backend's device-to-device copy (and between two GPUs, if present).
//!
//! The host→device link peak is not known to the driver API; `scripts/gpu-check.sh` reads the
//! PCIe generation and width from `nvidia-smi` and prints that peak next to `h2d pinned`.
//! Short mode for the GPU check: `--bench --warm-up-time 0.2 --measurement-time 1`.
//!
//! Every measured region ends with a wait on the GPU, so times are wall times of finished work.
//! Without CUDA the binary prints why and exits (status 1 when `TENSORMEM_REQUIRE_CUDA=1`).
//! After the groups it prints one summary table (time, GB/s, ratio to the group's baseline).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};

#[path = "cuda_memory/managed.rs"]
mod managed;
#[path = "cuda_memory/peer.rs"]
mod peer;
use tensormem::backend::BlockDesc;
use tensormem::ops::samples::support::range;
use tensormem::{Backend, BlockId, Error, MemoryKind};
use tensormem_cuda::{CudaBackend, CudaDesc, DeviceAlloc, ExpandableDesc};

const MIB: u64 = 1 << 20;
const TRANSFER: u64 = 64 * MIB;

/// (group, variant) -> (total time, iterations, bytes per iteration, note).
type Records = BTreeMap<(String, String), (Duration, u64, u64, String)>;
static RECORDS: Mutex<Records> = Mutex::new(BTreeMap::new());

fn record(group: &str, variant: &str, elapsed: Duration, iters: u64, bytes: u64) {
    let mut r = RECORDS.lock().unwrap();
    let e = r.entry((group.into(), variant.into())).or_insert((
        Duration::ZERO,
        0,
        bytes,
        String::new(),
    ));
    e.0 += elapsed;
    e.1 += iters;
}

fn note(group: &str, variant: &str, text: String) {
    let mut r = RECORDS.lock().unwrap();
    if let Some(e) = r.get_mut(&(group.to_string(), variant.to_string())) {
        e.3 = text;
    }
}

fn alloc(b: &CudaBackend, kind: MemoryKind, size: u64) -> BlockId {
    b.alloc_block(&BlockDesc {
        kind,
        size,
        label: "bench",
    })
    .unwrap()
}

/// Deterministic xorshift, so every variant sees the same workload.
fn sizes(n: usize, lo: u64, hi: u64, mut seed: u64) -> Vec<u64> {
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
            ((l + u * (h - l)).exp() as u64).div_ceil(256) * 256
        })
        .collect()
}

fn bench_transfer(c: &mut Criterion, b: &CudaBackend) {
    let mut g = c.benchmark_group("transfer");
    g.throughput(Throughput::Bytes(TRANSFER));
    let dev = alloc(b, MemoryKind::DeviceLocal, TRANSFER);
    let up = alloc(b, MemoryKind::Upload, TRANSFER);
    let down = alloc(b, MemoryKind::Readback, TRANSFER);
    let src: Vec<u8> = (0..TRANSFER).map(|i| i as u8).collect();
    let mut dst = vec![0u8; TRANSFER as usize];
    b.write_mapped(up, 0, &src).unwrap();
    let full = |blk| range(blk, 0, TRANSFER);

    g.bench_function("host memcpy (baseline)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                dst.copy_from_slice(black_box(&src));
            }
            let e = t.elapsed();
            record("transfer", "host memcpy (baseline)", e, iters, TRANSFER);
            e
        })
    });
    g.bench_function("h2d pinned", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let tk = b.copy(full(up), full(dev)).unwrap();
                b.wait_timeout(tk, None).unwrap();
            }
            let e = t.elapsed();
            record("transfer", "h2d pinned", e, iters, TRANSFER);
            e
        })
    });
    let addr = b.device_addr(full(dev)).unwrap();
    g.bench_function("h2d pageable", |bn| {
        bn.iter_custom(|iters| {
            b.context().bind_to_thread().unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                // SAFETY: `addr` is a live device block of TRANSFER bytes and `src` holds as many.
                unsafe { cudarc::driver::result::memcpy_htod_sync(addr, &src[..]) }.unwrap();
            }
            let e = t.elapsed();
            record("transfer", "h2d pageable", e, iters, TRANSFER);
            e
        })
    });
    g.bench_function("d2h pinned", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let tk = b.copy(full(dev), full(down)).unwrap();
                b.wait_timeout(tk, None).unwrap();
            }
            let e = t.elapsed();
            record("transfer", "d2h pinned", e, iters, TRANSFER);
            e
        })
    });
    g.bench_function("d2h pageable", |bn| {
        bn.iter_custom(|iters| {
            b.context().bind_to_thread().unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                // SAFETY: `addr` is a live device block of TRANSFER bytes and `dst` holds as many.
                unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut dst[..], addr) }.unwrap();
            }
            let e = t.elapsed();
            record("transfer", "d2h pageable", e, iters, TRANSFER);
            e
        })
    });
    g.finish();
    for blk in [dev, up, down] {
        b.free_block(blk).unwrap();
    }
}

fn bench_alloc(c: &mut Criterion, plain: &CudaBackend, ordered: &CudaBackend) {
    let tensors = sizes(256, 4 * 1024, 8 * MIB, 0x5EED);
    let total: u64 = tensors.iter().sum();
    let mut g = c.benchmark_group("alloc");
    let arena = alloc(plain, MemoryKind::DeviceLocal, total);
    g.bench_function("arena offsets (baseline)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut end = 0u64;
                for s in &tensors {
                    black_box(range(arena, end, *s));
                    end += s.div_ceil(256) * 256;
                }
                let tk = plain.flush().unwrap();
                plain.wait_timeout(tk, None).unwrap();
            }
            let e = t.elapsed();
            record("alloc", "arena offsets (baseline)", e, iters, 0);
            e
        })
    });
    for (name, b) in [
        ("cuMemAlloc per tensor", plain),
        ("cuMemAllocAsync per tensor", ordered),
    ] {
        g.bench_function(name, |bn| {
            bn.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    let ids: Vec<BlockId> = tensors
                        .iter()
                        .map(|s| alloc(b, MemoryKind::DeviceLocal, *s))
                        .collect();
                    for id in ids {
                        b.free_block(id).unwrap();
                    }
                    b.stream().synchronize().unwrap();
                }
                let e = t.elapsed();
                record("alloc", name, e, iters, 0);
                e
            })
        });
    }
    g.finish();
    plain.free_block(arena).unwrap();
}

/// Reserved-bytes statistics of one expandable-group variant.
#[derive(Default)]
struct Reserved {
    peak: u64,
    sum: u64,
    steps: u64,
}

impl Reserved {
    fn add(&mut self, now: u64) {
        self.peak = self.peak.max(now);
        self.sum += now;
        self.steps += 1;
    }
    fn text(&self) -> String {
        format!(
            "peak {} MiB, mean {} MiB reserved",
            self.peak / MIB,
            self.sum / self.steps.max(1) / MIB
        )
    }
}

fn bench_expandable(c: &mut Criterion, b: &CudaBackend) {
    let steps = sizes(24, 64 * MIB, 2048 * MIB, 0xA11C);
    let first = 64 * MIB;
    let mut g = c.benchmark_group("expandable");
    let mut plain_res = Reserved::default();
    g.bench_function("plain arena (realloc + copy)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut block = alloc(b, MemoryKind::DeviceLocal, first);
                let (mut cap, mut live) = (first, first);
                for &need in &steps {
                    if need > cap {
                        let bigger = alloc(b, MemoryKind::DeviceLocal, need);
                        plain_res.add(cap + need);
                        let tk = b
                            .copy(range(block, 0, live), range(bigger, 0, live))
                            .unwrap();
                        b.wait_timeout(tk, None).unwrap();
                        b.free_block(block).unwrap();
                        block = bigger;
                        cap = need;
                    }
                    live = need;
                    let tk = b.fill_zero(range(block, 0, need)).unwrap();
                    b.wait_timeout(tk, None).unwrap();
                    plain_res.add(cap);
                }
                b.free_block(block).unwrap();
            }
            let e = t.elapsed();
            record("expandable", "plain arena (realloc + copy)", e, iters, 0);
            e
        })
    });
    let g_size = b.vmm_granularity().unwrap();
    let mut exp_res = Reserved::default();
    g.bench_function("expandable (grow/shrink in place)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let block = b
                    .alloc_expandable_block(&ExpandableDesc {
                        reserve: 4096 * MIB,
                        initial: first,
                        chunk: 16 * MIB.max(g_size),
                        label: "bench",
                        holes: false,
                    })
                    .unwrap();
                for &need in &steps {
                    let cap = b.grow_block(block, need).unwrap();
                    let tk = b.fill_zero(range(block, 0, need)).unwrap();
                    b.wait_timeout(tk, None).unwrap();
                    exp_res.add(cap);
                    b.shrink_block(block, need).unwrap();
                }
                b.free_block(block).unwrap();
            }
            let e = t.elapsed();
            record(
                "expandable",
                "expandable (grow/shrink in place)",
                e,
                iters,
                0,
            );
            e
        })
    });
    g.finish();
    note(
        "expandable",
        "plain arena (realloc + copy)",
        plain_res.text(),
    );
    note(
        "expandable",
        "expandable (grow/shrink in place)",
        exp_res.text(),
    );
}

/// Device-to-device copy of up to 1 GiB: the HBM bandwidth the copy engine reaches, counted as
/// bytes read plus bytes written (the usual convention for a copy).
fn bench_hbm(c: &mut Criterion, b: &CudaBackend) {
    let size = (b.capabilities().budget.unwrap_or(0) / 8).clamp(64 * MIB, 1024 * MIB);
    let mut g = c.benchmark_group("hbm");
    g.throughput(Throughput::Bytes(2 * size));
    let (x, y) = (
        alloc(b, MemoryKind::DeviceLocal, size),
        alloc(b, MemoryKind::DeviceLocal, size),
    );
    g.bench_function("d2d copy (read + write)", |bn| {
        bn.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let tk = b.copy(range(x, 0, size), range(y, 0, size)).unwrap();
                b.wait_timeout(tk, None).unwrap();
            }
            let e = t.elapsed();
            record("hbm", "d2d copy (read + write)", e, iters, 2 * size);
            e
        })
    });
    g.finish();
    for blk in [x, y] {
        b.free_block(blk).unwrap();
    }
}

/// The HBM peak from the device's attributes: memory clock × bus width × 2 (double data rate).
fn hbm_peak_gbs(b: &CudaBackend) -> Option<f64> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let ctx = b.context();
    let khz = ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        .ok()?;
    let bits = ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
        .ok()?;
    (khz > 0 && bits > 0).then(|| f64::from(khz) * 1e3 * 2.0 * f64::from(bits) / 8.0 / 1e9)
}

fn summary() {
    let r = RECORDS.lock().unwrap();
    println!("\n=== tensormem-cuda summary ===");
    println!(
        "{:<12} {:<36} {:>12} {:>9} {:>9}  notes",
        "group", "variant", "time/iter", "GB/s", "x base"
    );
    let mut base: BTreeMap<&str, f64> = BTreeMap::new();
    for ((group, variant), (total, iters, _, _)) in r.iter() {
        if variant.contains("baseline") || (group == "expandable" && variant.starts_with("plain")) {
            base.insert(group, total.as_secs_f64() / (*iters).max(1) as f64);
        }
    }
    for ((group, variant), (total, iters, bytes, text)) in r.iter() {
        let per = total.as_secs_f64() / (*iters).max(1) as f64;
        let gbs = if *bytes > 0 {
            format!("{:.1}", *bytes as f64 / per / 1e9)
        } else {
            "-".into()
        };
        let ratio = base
            .get(group.as_str())
            .map(|b| format!("{:.2}", per / b))
            .unwrap_or_else(|| "-".into());
        println!(
            "{group:<12} {variant:<36} {:>10.3}ms {gbs:>9} {ratio:>9}  {text}",
            per * 1e3
        );
    }
}

fn main() {
    let require = std::env::var("TENSORMEM_REQUIRE_CUDA").is_ok_and(|v| v == "1");
    let open = |device_alloc| {
        CudaBackend::new(&CudaDesc {
            device_alloc,
            ..CudaDesc::default()
        })
    };
    let (plain, ordered) = match (
        open(DeviceAlloc::MemAlloc),
        open(DeviceAlloc::StreamOrdered),
    ) {
        (Ok(p), Ok(o)) => (p, o),
        (Err(Error::BackendUnavailable { reason, .. }), _) => {
            eprintln!("cuda_memory: skipped, CUDA unavailable: {reason}");
            std::process::exit(i32::from(require));
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("cuda_memory: backend creation failed: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "device: {} (budget {} MiB)",
        plain.capabilities().device_name,
        plain.capabilities().budget.unwrap_or(0) / MIB
    );
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    bench_transfer(&mut c, &plain);
    bench_alloc(&mut c, &plain, &ordered);
    bench_expandable(&mut c, &plain);
    bench_hbm(&mut c, &plain);
    managed::bench_managed(&mut c, &plain);
    peer::bench_peer(&mut c, &plain);
    c.final_summary();
    summary();
    match hbm_peak_gbs(&plain) {
        Some(peak) => println!("HBM peak from the device attributes: {peak:.0} GB/s"),
        None => println!("HBM peak: the device does not report its memory clock / bus width"),
    }
    println!("kernels: {} ({})", plain.kernel_target(), plain.toolchain());
}
