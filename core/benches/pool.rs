//! Pool cost per tensor: allocate + free through the device arena pool on the host backend, against
//! `Vec<u8>` allocation of the same sizes in the same run, and the cost of `zero_on_reuse`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

use tensormem::pool::ReplayPool;
use tensormem::{ArenaPool, HostBackend, HostConfig, PoolConfig};

/// Sizes of a transformer-like step: many small and medium tensors (seeded, fixed).
fn sizes() -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            256 << (x % 12) // 256 B .. 512 KiB
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let sizes = sizes();
    let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let mut g = c.benchmark_group("alloc_free_1024_tensors");
    g.bench_function("vec_u8", |b| {
        b.iter(|| {
            for &s in &sizes {
                black_box(Vec::<u8>::with_capacity(s as usize));
            }
        })
    });
    for (name, zero) in [("arena_pool", false), ("arena_pool_zero_on_reuse", true)] {
        let pool = ArenaPool::new(
            backend.clone(),
            PoolConfig {
                zero_on_reuse: zero,
                ..PoolConfig::device()
            },
        )
        .expect("pool");
        g.bench_function(name, |b| {
            b.iter(|| {
                for &s in &sizes {
                    let a = pool.allocate(s, 1, "bench").expect("allocate");
                    pool.free(black_box(a).handle).expect("free");
                }
            })
        });
    }
    g.finish();
}

/// One transformer-like step (seq 128, 6 layers): a residual stream and per-layer temporaries,
/// through `alloc`/`free` closures so the same sequence drives both pools.
fn transformer_step(alloc: &mut dyn FnMut(u64) -> u64, free: &mut dyn FnMut(u64)) {
    let (seq, hidden) = (128u64, 128 * 1536);
    let mut x = alloc(hidden);
    for _ in 0..6 {
        let qkv = alloc(3 * hidden);
        let scores = alloc(12 * seq * seq * 4);
        let ctx = alloc(hidden);
        free(scores);
        free(qkv);
        let ffn = alloc(4 * hidden);
        let out = alloc(hidden);
        free(ffn);
        free(ctx);
        free(x);
        x = out;
    }
    free(x);
}

fn replay(c: &mut Criterion) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let mut g = c.benchmark_group("transformer_step_37_allocations");
    let dynamic = ArenaPool::new(backend.clone(), PoolConfig::device()).expect("pool");
    g.bench_function("dynamic_pool", |b| {
        b.iter(|| {
            let mut live = std::collections::HashMap::new();
            let mut next = 0u64;
            transformer_step(
                &mut |size| {
                    next += 1;
                    live.insert(next, dynamic.allocate(size, 256, "t").expect("allocate"));
                    next
                },
                &mut |id| dynamic.free(live.remove(&id).expect("live").handle).expect("free"),
            );
        })
    });
    let pool = Arc::new(ArenaPool::new(backend, PoolConfig::device()).expect("pool"));
    let replay = ReplayPool::new(pool.clone(), Duration::from_millis(200));
    let mut run = || {
        replay.begin_step().expect("begin");
        let mut live = std::collections::HashMap::new();
        let mut next = 0u64;
        transformer_step(
            &mut |size| {
                next += 1;
                live.insert(next, replay.allocate(size, 256, "t").expect("allocate"));
                next
            },
            &mut |id| replay.free(live.remove(&id).expect("live").handle).expect("free"),
        );
        replay.end_step().expect("end");
    };
    run();
    run();
    g.bench_function("replayed_plan", |b| b.iter(&mut run));
    g.finish();
    let s = replay.stats();
    eprintln!(
        "replay: arena {} B (lower bound {} B) vs dynamic pool peak in use {} B, reserved {} B; \
         {} planned / {} dynamic allocations",
        s.arena_size,
        s.lower_bound,
        dynamic.stats().peak_in_use,
        dynamic.stats().peak_reserved,
        s.planned,
        s.dynamic
    );
}

criterion_group!(benches, bench, replay);
criterion_main!(benches);
