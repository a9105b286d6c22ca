//! Pool cost per tensor: allocate + free through the device arena pool on the host backend, against
//! `Vec<u8>` allocation of the same sizes in the same run: the arena called directly, the same
//! arena behind `Arc<dyn DevicePool>` as a runtime holds it with no adaptor configured (issue 12:
//! an unconfigured adaptor must cost nothing), the default stack (the leak report), statistics
//! alone and on the default stack, and `zero_on_reuse` (whose fills run on the host backend's
//! worker thread, outside the measured thread's CPU time: read its wall time instead).
//!
//! Times are the benchmark thread's CPU time ([`ThreadCpu`]), not wall time: on a shared,
//! loaded machine wall time doubles at random when other processes take the cores.
//!
//! Run: `cargo bench -p tensormem --bench pool -- alloc_free_1024_tensors`; read each result as a
//! ratio to `vec_u8` of the same run.

// A benchmark whose setup fails should stop loudly; criterion's macros emit undocumented items.
#![allow(clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "support/sizes.rs"]
mod sizes;
#[path = "support/thread_cpu.rs"]
mod thread_cpu;
use sizes::{SEED, sizes};
use std::time::Duration;
use thread_cpu::ThreadCpu;

use tensormem::pool::{ReplayConfig, ReplayPool};
use tensormem::{ArenaConfig, ArenaPool, DevicePool, HostBackend, HostConfig, PoolConfig};

fn bench(c: &mut Criterion<ThreadCpu>) {
    let sizes = sizes(SEED, 1024);
    let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let mut g = c.benchmark_group("alloc_free_1024_tensors");
    g.bench_function("vec_u8", |b| {
        b.iter(|| {
            for &s in &sizes {
                black_box(Vec::<u8>::with_capacity(s as usize));
            }
        })
    });
    let arena = ArenaPool::new(backend.clone(), ArenaConfig::device()).expect("pool");
    g.bench_function("arena_pool", |b| {
        b.iter(|| {
            for &s in &sizes {
                let a = arena.allocate(s, 1, "bench").expect("allocate");
                arena.free(black_box(a).handle).expect("free");
            }
        })
    });
    // (name, leak report, statistics, zero on reuse); the default stack has the leak report only.
    let stacks = [
        ("stack_no_adaptors", false, false, false),
        ("stack_default", true, false, false),
        ("stack_statistics", false, true, false),
        ("stack_default_statistics", true, true, false),
        ("stack_default_zero_on_reuse", true, false, true),
    ];
    for (name, leak_report, statistics, zero_on_reuse) in stacks {
        let pool: Arc<dyn DevicePool> = PoolConfig {
            leak_report,
            statistics,
            zero_on_reuse,
            ..PoolConfig::device()
        }
        .build(backend.clone())
        .expect("pool")
        .top;
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

/// What the transformer step asks of a pool.
enum Req {
    Alloc(u64),
    Free(u64),
}

/// One transformer-like step (seq 128, 6 layers): a residual stream and per-layer temporaries.
/// `pool(Req::Alloc(size))` returns an id; `pool(Req::Free(id))` frees it.
fn transformer_step(pool: &mut dyn FnMut(Req) -> u64) {
    let (seq, hidden) = (128u64, 128 * 1536);
    let mut x = pool(Req::Alloc(hidden));
    for _ in 0..6 {
        let qkv = pool(Req::Alloc(3 * hidden));
        let scores = pool(Req::Alloc(12 * seq * seq * 4));
        let ctx = pool(Req::Alloc(hidden));
        pool(Req::Free(scores));
        pool(Req::Free(qkv));
        let ffn = pool(Req::Alloc(4 * hidden));
        let out = pool(Req::Alloc(hidden));
        pool(Req::Free(ffn));
        pool(Req::Free(ctx));
        pool(Req::Free(x));
        x = out;
    }
    pool(Req::Free(x));
}

fn replay(c: &mut Criterion<ThreadCpu>) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let mut g = c.benchmark_group("transformer_step_37_allocations");
    let dynamic = ArenaPool::new(backend.clone(), ArenaConfig::device()).expect("pool");
    let mut live = std::collections::HashMap::new();
    let mut next = 0u64;
    g.bench_function("dynamic_pool", |b| {
        b.iter(|| {
            transformer_step(&mut |req| match req {
                Req::Alloc(size) => {
                    next += 1;
                    live.insert(next, dynamic.allocate(size, 256, "t").expect("allocate"));
                    next
                }
                Req::Free(id) => {
                    let a = live.remove(&id).expect("live");
                    dynamic.free(a.handle).expect("free");
                    0
                }
            })
        })
    });
    let pool = Arc::new(ArenaPool::new(backend, ArenaConfig::device()).expect("pool"));
    let replay = ReplayPool::new(
        pool,
        ReplayConfig {
            plan_time_limit: Duration::from_millis(200),
            ..ReplayConfig::default()
        },
    );
    let mut live = std::collections::HashMap::new();
    let mut run = || {
        replay.begin_step().expect("begin");
        transformer_step(&mut |req| match req {
            Req::Alloc(size) => {
                next += 1;
                live.insert(next, replay.allocate(size, 256, "t").expect("allocate"));
                next
            }
            Req::Free(id) => {
                let a = live.remove(&id).expect("live");
                replay.free(a.handle).expect("free");
                0
            }
        });
        replay.end_step().expect("end");
    };
    run();
    run();
    g.bench_function("replayed_plan", |b| b.iter(&mut run));
    g.finish();
    let s = replay.replay_stats();
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

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench, replay
}
criterion_main!(benches);
