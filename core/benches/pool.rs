//! Pool cost per tensor: allocate + free through the device arena pool on the host backend, against
//! `Vec<u8>` allocation of the same sizes in the same run, and the cost of `zero_on_reuse`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
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

criterion_group!(benches, bench);
criterion_main!(benches);
