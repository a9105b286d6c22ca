//! Tracing overhead: the same workloads with tracing off and on, in the same run.
//!
//! - `alloc_free_1024_tensors`: allocate + free 1024 tensors through the device arena pool (the
//!   hot path with the most events per unit of work);
//! - `model_run_64_ops`: one run of a compiled 64-op model (scale and add over 4096 f32) on the
//!   host backend, where tracing adds one `Use` per binding and a virtual allocation per planned
//!   intermediate; `on_backtraces` also captures a backtrace per (virtual) allocation.
//!
//! Events are taken out of the tracer every iteration, so the measured cost includes dropping them.
// A benchmark whose setup fails should stop loudly; criterion's macros emit undocumented items.
#![allow(clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "support/sizes.rs"]
mod sizes;
use sizes::{SEED, sizes};
use tensormem::pool::Traced;
use tensormem::{
    ArenaConfig, ArenaPool, DType, DevicePool, Graph, HostBackend, HostConfig, Op, Runtime,
    RuntimeConfig, Tracer,
};

fn tracers() -> [(&'static str, Option<Tracer>); 3] {
    [
        ("off", None),
        ("on", Some(Tracer::new())),
        ("on_backtraces", Some(Tracer::with_backtraces())),
    ]
}

fn alloc_free(c: &mut Criterion) {
    let sizes = sizes(SEED, 1024);
    let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let mut g = c.benchmark_group("alloc_free_1024_tensors");
    for (name, tracer) in tracers().into_iter().take(2) {
        let arena = Arc::new(ArenaPool::new(backend.clone(), ArenaConfig::device()).expect("pool"));
        // Tracing is an adaptor: off, the arena is used bare.
        let pool: Arc<dyn DevicePool> = match &tracer {
            Some(t) => Arc::new(Traced::new(arena, t.clone())),
            None => arena,
        };
        let mut live = Vec::with_capacity(sizes.len());
        g.bench_function(name, |b| {
            b.iter(|| {
                for &s in &sizes {
                    live.push(pool.allocate(s, 1, "t").expect("allocate"));
                }
                for a in live.drain(..) {
                    pool.free(a.handle).expect("free");
                }
                if let Some(t) = &tracer {
                    black_box(t.take());
                }
            })
        });
    }
    g.finish();
}

fn model_run(c: &mut Criterion) {
    const N: usize = 4096;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[N]);
    let mut h = x;
    for i in 0..32 {
        let s = g
            .op(
                Op::Scale {
                    len: N as u32,
                    alpha: 0.5,
                },
                &[h],
                &[N],
                &format!("scale{i}"),
            )
            .expect("op");
        h = g
            .op(
                Op::Add {
                    len: N as u32,
                    b_len: N as u32,
                },
                &[s, h],
                &[N],
                &format!("add{i}"),
            )
            .expect("op");
    }
    g.output(h);
    let mut group = c.benchmark_group("model_run_64_ops");
    for (name, tracer) in tracers() {
        let backend = Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
        let rt = Runtime::new(backend, RuntimeConfig::default()).expect("runtime");
        rt.set_tracer(tracer.clone());
        let mut m = rt.compile(&g).expect("compile");
        m.set_input(x, bytemuck::cast_slice(&vec![1.0f32; N]))
            .expect("input");
        group.bench_function(name, |b| {
            b.iter(|| {
                m.run().expect("run");
                if let Some(t) = &tracer {
                    black_box(t.take());
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, alloc_free, model_run);
criterion_main!(benches);
