//! The validating front's cost per call (issue 12): the same calls on the host backend, bare and
//! through [`Validated`], in one run. Read `validated` as a ratio to `bare` in each group.
//!
//! * `write_mapped_256B`: a synchronous mapped write (range, alignment and visibility checks);
//! * `copy_wait_256B`: a device copy and its wait (checks, in-flight use recorded and pruned);
//! * `dispatch_relu_wait`: a 64-element relu on one input and one output, then its wait (binding
//!   checks, overlap of outputs, uses recorded);
//! * `dispatch_16_relu_then_wait`: sixteen dispatches queued, one wait (the enqueue cost).
//!
//! Times are the calling thread's CPU time ([`ThreadCpu`]): the front's checks and the enqueue,
//! not the host worker's execution or the sleep in `wait`, which the front does not change.
//!
//! Run: `cargo bench -p tensormem --bench front`.

// A benchmark whose setup fails should stop loudly; criterion's macros emit undocumented items.
#![allow(clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "support/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpu;

use tensormem::ops::Op;
use tensormem::{Backend, BlockDesc, BlockRange, HostBackend, HostConfig, MemoryKind, Validated};

/// The blocks one variant works on: an upload block and a device block.
struct Setup {
    backend: Arc<dyn Backend>,
    upload: BlockRange,
    src: BlockRange,
    dst: BlockRange,
}

fn setup(backend: Arc<dyn Backend>) -> Setup {
    let block = |kind, label| {
        backend
            .alloc_block(&BlockDesc {
                kind,
                size: 4096,
                label,
            })
            .expect("block")
    };
    let upload = block(MemoryKind::Upload, "bench upload");
    let device = block(MemoryKind::DeviceLocal, "bench device");
    let range = |block, offset| BlockRange {
        block,
        offset,
        size: 256,
    };
    Setup {
        upload: range(upload, 0),
        src: range(device, 0),
        dst: range(device, 1024),
        backend,
    }
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let host: Arc<dyn Backend> =
        Arc::new(HostBackend::new(HostConfig::default()).expect("host backend"));
    let variants = [
        ("bare", setup(host.clone())),
        ("validated", setup(Arc::new(Validated::new(host)))),
    ];
    let relu = Op::Relu { len: 64 };
    let data = [7u8; 256];

    let mut g = c.benchmark_group("front_write_mapped_256B");
    for (name, s) in &variants {
        g.bench_function(*name, |b| {
            b.iter(|| {
                s.backend
                    .write_mapped(s.upload.block, 0, black_box(&data))
                    .expect("write")
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("front_copy_wait_256B");
    for (name, s) in &variants {
        g.bench_function(*name, |b| {
            b.iter(|| {
                let t = s.backend.copy(s.src, s.dst).expect("copy");
                s.backend.wait(t).expect("wait")
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("front_dispatch_relu_wait");
    for (name, s) in &variants {
        g.bench_function(*name, |b| {
            b.iter(|| {
                let t = s
                    .backend
                    .dispatch(&relu, &[s.src, s.dst])
                    .expect("dispatch");
                s.backend.wait(t).expect("wait")
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("front_dispatch_16_relu_then_wait");
    for (name, s) in &variants {
        g.bench_function(*name, |b| {
            b.iter(|| {
                let mut t = tensormem::Ticket::DONE;
                for _ in 0..16 {
                    t = s
                        .backend
                        .dispatch(&relu, &[s.src, s.dst])
                        .expect("dispatch");
                }
                s.backend.wait(t).expect("wait")
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
