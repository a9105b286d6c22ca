//! Pool throughput under contention (issue 20): 1, 2, 4, 8 and 16 threads each allocate and
//! free through one shared pool at once, and criterion reports allocations per second (`thrpt`,
//! elements = allocations of all threads) per thread count. Read each row as a ratio to the same
//! pool's 1-thread row, and to `vec_u8` (the system allocator, thread-cached, the peer that
//! scales) at the same thread count.
//!
//! Pools: the [`ArenaPool`] alone, and the runtime's default device stack (the leak report over
//! the arena, on the validating front) as an application's threads reach it through
//! [`Runtime::device_pool`].
//!
//! Every thread runs the same seeded workload: sizes 256 B .. 512 KiB (a transformer step's
//! spread), a window of 4 live allocations (allocate one, free the oldest), so frees interleave
//! with allocations as in a real step and the pool is never empty.
//!
//! Wall time, not thread CPU time: contention is the point (a thread waiting on a lock spends
//! wall time, not CPU time). On a shared machine read ratios of the same run, never absolute
//! numbers; with fewer cores than threads the upper rows measure lock hand-off under
//! oversubscription, which is what an inference server with more request threads than cores sees.
//!
//! After criterion, a summary interleaves every (pool, thread count) measurement round-robin,
//! 15 rounds, and prints each one's **best** round (allocations/s) with its ratio to the same
//! pool at 1 thread and to `vec_u8` at the same thread count: on a loaded shared machine the
//! best of interleaved rounds is the number least disturbed by other processes, and every entry
//! saw the same load.
//!
//! Run: `cargo bench -p tensormem --bench pool_threads` (summary on stderr).

// A benchmark whose setup fails should stop loudly; criterion's macros emit undocumented items.
#![allow(clippy::expect_used, missing_docs)]

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

#[path = "support/sizes.rs"]
mod support_sizes;
use support_sizes::SEED;

use tensormem::{
    ArenaConfig, ArenaPool, DevicePool, HostBackend, HostConfig, Runtime, RuntimeConfig,
};

/// Allocations (each freed again) per thread per iteration.
const OPS: usize = 2_000;
/// Live allocations each thread keeps.
const WINDOW: usize = 4;
const THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// The seeded size sequence of thread `t`: 256 B .. 512 KiB.
fn sizes(t: usize) -> Vec<u64> {
    let seed = SEED ^ (t as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    support_sizes::sizes(seed, OPS)
}

/// One thread's workload on a pool.
fn pool_worker(pool: &dyn DevicePool, sizes: &[u64]) {
    let mut live = VecDeque::with_capacity(WINDOW + 1);
    for &s in sizes {
        live.push_back(pool.allocate(s, 256, "t").expect("allocate"));
        if live.len() > WINDOW {
            let a = live.pop_front().expect("live");
            pool.free(black_box(a).handle).expect("free");
        }
    }
    for a in live {
        pool.free(a.handle).expect("free");
    }
}

/// The same workload on the system allocator.
fn vec_worker(sizes: &[u64]) {
    let mut live = VecDeque::with_capacity(WINDOW + 1);
    for &s in sizes {
        live.push_back(Vec::<u8>::with_capacity(s as usize));
        if live.len() > WINDOW {
            black_box(live.pop_front());
        }
    }
}

/// Wall time of `iters` rounds in which `threads` threads run `work(thread)` at once (released
/// together by a barrier; thread start-up is outside the timed span, the barrier's release is
/// inside it, so a round is never undercounted).
fn timed_rounds(iters: u64, threads: usize, work: &(dyn Fn(usize) + Sync)) -> Duration {
    let start_line = Barrier::new(threads + 1);
    let finish_line = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (start_line, finish_line) = (&start_line, &finish_line);
            s.spawn(move || {
                for _ in 0..iters {
                    start_line.wait();
                    work(t);
                    finish_line.wait();
                }
            });
        }
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            // The clock starts before the release: taken after it, a timer thread descheduled
            // while the workers run (a loaded machine) would miss their work, and the best of
            // rounds would pick that undercount (it showed 25x on 4 threads of 2 cores).
            let t0 = Instant::now();
            start_line.wait();
            finish_line.wait();
            total += t0.elapsed();
        }
        total
    })
}

fn contention(c: &mut Criterion) {
    let sizes: Vec<Vec<u64>> = (0..16).map(sizes).collect();
    let host = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let arena = ArenaPool::new(host.clone(), ArenaConfig::device()).expect("pool");
    let rt = Runtime::new(host.clone(), RuntimeConfig::default()).expect("runtime");
    let stack = rt.device_pool();
    let subjects: [(&str, &(dyn Fn(usize) + Sync)); 3] = [
        ("vec_u8", &|t| vec_worker(&sizes[t])),
        ("arena_pool", &|t| pool_worker(&arena, &sizes[t])),
        ("default_stack", &|t| pool_worker(stack.as_ref(), &sizes[t])),
    ];
    let mut g = c.benchmark_group("alloc_free_contended");
    for &(name, work) in &subjects {
        for threads in THREADS {
            g.throughput(Throughput::Elements((threads * OPS) as u64));
            g.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &n| {
                b.iter_custom(|iters| timed_rounds(iters, n, work))
            });
        }
    }
    g.finish();
    summary(&subjects);
}

/// The interleaved best-of-rounds table (see the module doc).
fn summary(subjects: &[(&str, &(dyn Fn(usize) + Sync))]) {
    const ROUNDS: usize = 15;
    const ITERS: u64 = 10;
    let mut best = vec![vec![0f64; THREADS.len()]; subjects.len()];
    for _ in 0..ROUNDS {
        for (i, (_, work)) in subjects.iter().enumerate() {
            for (j, &n) in THREADS.iter().enumerate() {
                let t = timed_rounds(ITERS, n, *work);
                let rate = (ITERS as usize * n * OPS) as f64 / t.as_secs_f64();
                best[i][j] = best[i][j].max(rate);
            }
        }
    }
    eprintln!(
        "\nallocations per second, best of {ROUNDS} interleaved rounds \
         (x1: ratio to 1 thread; xvec: ratio to vec_u8 at the same thread count)"
    );
    for (i, (name, _)) in subjects.iter().enumerate() {
        let row: Vec<String> = THREADS
            .iter()
            .enumerate()
            .map(|(j, n)| {
                format!(
                    "{n:>2} thr {:>6.2} M/s x1 {:.2} xvec {:.2}",
                    best[i][j] / 1e6,
                    best[i][j] / best[i][0],
                    best[i][j] / best[0][j]
                )
            })
            .collect();
        eprintln!("{name:<14} {}", row.join(" | "));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = contention
}
criterion_main!(benches);
