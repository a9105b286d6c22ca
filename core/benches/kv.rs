//! The paged KV cache's bookkeeping and swaps.
//!
//! * `kv_ledger`: append (per token, blocks filling and being keyed included), fork (a sequence
//!   of 1, 64 and 256 blocks), free (64 blocks), and admission of a prompt whose 64 blocks are
//!   all in the prefix cache (per block: key, probe, token comparison, hold).
//! * `kv_swap` (printed before the timings): a 64-block sequence swapped out and back in on the
//!   host backend, mapped and with staging forced (its cached blocks evicted in between, untimed,
//!   so every block is restored from the host copy), each direction waited for, against the
//!   backend's own copies of the same bytes to a readback block and back on the transfer lane,
//!   interleaved, as GB/s and their ratio.
//!
//! Run: `cargo bench -p tensormem --bench kv`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::panic,
    reason = "benchmark driver: a failure aborts the run"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensormem::backend::lanes;
use tensormem::kv::{KvCache, KvCacheConfig, KvDType, KvGeometry, KvLedger, Preemption};
use tensormem::{
    ArenaConfig, ArenaPool, DType, DevicePool, HostBackend, HostConfig, MemoryKind, Runtime,
    RuntimeConfig,
};

const BT: u32 = 16;

fn ledger() -> KvLedger {
    KvLedger::new(BT, 1 << 20, 1 << 16).unwrap()
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv_ledger");
    g.throughput(Throughput::Elements(1024));
    g.bench_function("append_1024_tokens", |b| {
        let mut l = ledger();
        let mut salt = 0u64;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                salt += 1;
                let seq = l.admit(&[], salt).unwrap().seq;
                let t = Instant::now();
                for tok in 0..1024u32 {
                    black_box(l.append(seq, tok).unwrap());
                }
                total += t.elapsed();
                l.free(seq).unwrap();
            }
            total
        });
    });
    g.finish();
}

fn fork_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv_ledger");
    for blocks in [1usize, 64, 256] {
        g.bench_with_input(BenchmarkId::new("fork", blocks), &blocks, |b, &blocks| {
            let mut l = ledger();
            let tokens: Vec<u32> = (0..(blocks * BT as usize) as u32).collect();
            let parent = l.admit(&tokens, 1).unwrap().seq;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let child = black_box(l.fork(parent).unwrap());
                    total += t.elapsed();
                    l.free(child).unwrap();
                }
                total
            });
        });
    }
    g.bench_function("free_64_blocks", |b| {
        let mut l = ledger();
        let tokens: Vec<u32> = (0..64 * BT).collect();
        let mut salt = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                salt += 1;
                let seq = l.admit(&tokens, salt).unwrap().seq;
                let t = Instant::now();
                l.free(black_box(seq)).unwrap();
                total += t.elapsed();
            }
            total
        });
    });
    g.finish();
}

fn prefix(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv_ledger");
    g.throughput(Throughput::Elements(64));
    g.bench_function("prefix_hit_64_blocks", |b| {
        let mut l = ledger();
        // 64 full blocks and one more token: the 64 blocks are looked up and found.
        let tokens: Vec<u32> = (0..64 * BT + 1)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let first = l.admit(&tokens, 0).unwrap().seq;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let a = black_box(l.admit(&tokens, 0).unwrap());
                total += t.elapsed();
                assert_eq!(a.cached_tokens, 64 * BT as usize);
                l.free(a.seq).unwrap();
            }
            total
        });
        l.free(first).unwrap();
    });
    g.finish();
}

/// Swap out and in against the backend's own copies of the same bytes, interleaved.
fn swap_summary() {
    for staging in [false, true] {
        let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
        let rt = Runtime::new(
            backend,
            RuntimeConfig {
                force_staging: staging,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let g = KvGeometry::new(4, 8, 128, KvDType::F16, BT, 4096).unwrap();
        let bytes = g.block_bytes() * 64;
        let mut cache = KvCache::new(
            &rt,
            KvCacheConfig {
                geometry: g,
                budget: bytes * 2,
                preemption: Preemption::Swap,
            },
        )
        .unwrap();
        let seq = cache
            .admit(&(0..64 * BT).collect::<Vec<_>>(), 0)
            .unwrap()
            .seq;
        let plain = rt.alloc(DType::U8, &[bytes as usize], "baseline").unwrap();
        let readback = ArenaPool::new(
            rt.backend().clone(),
            ArenaConfig::host_visible(MemoryKind::Readback),
        )
        .unwrap();
        let slot = readback.allocate(bytes, 1, "baseline slot").unwrap();
        let lane = lanes::of(rt.backend().as_ref());
        let (mut swap_s, mut plain_s) = (0.0, 0.0);
        let rounds = 20;
        let filler: Vec<u32> = (1 << 20..(1 << 20) + 128 * BT).collect();
        for _ in 0..rounds {
            let t = Instant::now();
            cache.preempt(seq).unwrap();
            rt.synchronize().unwrap();
            swap_s += t.elapsed().as_secs_f64();
            // A filler takes every block, evicting the swapped blocks the cache still held, so
            // the resume restores all 64 from the host copy.
            let f = cache.admit(&filler, 0).unwrap().seq;
            cache.free(f).unwrap();
            let t = Instant::now();
            cache.resume(seq).unwrap();
            rt.synchronize().unwrap();
            swap_s += t.elapsed().as_secs_f64();
            assert_eq!(
                cache.stats().ledger.swapped_blocks % 128,
                0,
                "a block was not restored"
            );
            let t = Instant::now();
            let device = rt.device_pool().resolve(plain.allocation().handle).unwrap();
            let host = readback.resolve(slot.handle).unwrap();
            lane.wait_transfer(lane.transfer_copy(device, host).unwrap())
                .unwrap();
            lane.wait_transfer(lane.transfer_copy(host, device).unwrap())
                .unwrap();
            plain_s += t.elapsed().as_secs_f64();
        }
        let gbs = |s: f64| 2.0 * bytes as f64 * f64::from(rounds) / s / 1e9;
        println!(
            "kv_swap host{}: 64 blocks ({} MiB) out and in {:.2} GB/s, backend copies out and in {:.2} GB/s, ratio {:.2}",
            if staging { " (staging forced)" } else { "" },
            bytes >> 20,
            gbs(swap_s),
            gbs(plain_s),
            gbs(swap_s) / gbs(plain_s)
        );
        rt.free(plain).unwrap();
        readback.free(slot.handle).unwrap();
        cache.release().unwrap();
    }
}

fn all(c: &mut Criterion) {
    swap_summary();
    append(c);
    fork_free(c);
    prefix(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
