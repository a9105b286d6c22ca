//! Bandwidth per transfer path of a device set (issue 20), against the single-device upload of the
//! same bytes in the same run: two host devices that map their memory (`mapped`: integrated GPUs,
//! lavapipe), and two that stage every transfer through their belts (`staged`: discrete GPUs).
//!
//! * `upload`: host bytes into a tensor of device 0, waited for — the baseline;
//! * `cross_device`: device 0 → device 1 ([`DeviceSet::copy`], staged through host memory in
//!   chunks), waited for; the target is at least 0.8× `upload`;
//! * `same_device`: device 0 → device 0, one device copy, waited for.
//!
//! Wall time: a copy's cost includes the belt's device copies on the backend's worker thread.
//! Read each result as a ratio to `upload` of its group (criterion prints the throughput).
//!
//! Run: `cargo bench -p tensormem --bench transfer`.

// A benchmark whose setup fails should stop loudly; criterion's macros emit undocumented items.
#![allow(clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use tensormem::{
    Backend, DType, DeviceId, DeviceSet, HostBackend, HostConfig, RuntimeConfig, Tensor,
};

/// Bytes per copy: larger than every cache, a few staging blocks.
const BYTES: usize = 32 << 20;

fn set(force_staging: bool) -> DeviceSet {
    let host = || -> Arc<dyn Backend> {
        Arc::new(
            HostBackend::new(HostConfig {
                force_staging,
                ..HostConfig::default()
            })
            .expect("host backend"),
        )
    };
    DeviceSet::new(vec![host(), host()], RuntimeConfig::default()).expect("device set")
}

fn tensor(set: &DeviceSet, device: u32, label: &str) -> Tensor {
    set.alloc(DeviceId(device), DType::U8, &[BYTES], label)
        .expect("alloc")
}

fn bench(c: &mut Criterion) {
    let data: Vec<u8> = (0..BYTES).map(|i| (i * 31 % 251) as u8).collect();
    for (name, force_staging) in [("mapped", false), ("staged", true)] {
        let set = set(force_staging);
        let a = tensor(&set, 0, "a");
        let b = tensor(&set, 1, "b");
        let a2 = tensor(&set, 0, "a2");
        set.upload(&a, &data).expect("upload");
        let wait = |device: u32, t| {
            set.device(DeviceId(device))
                .expect("device")
                .backend()
                .wait(t)
                .expect("wait")
        };
        let mut g = c.benchmark_group(format!("transfer_{name}"));
        g.throughput(Throughput::Bytes(BYTES as u64));
        g.sample_size(10);
        g.measurement_time(Duration::from_secs(4));
        g.bench_function("upload", |bench| {
            bench.iter(|| wait(0, set.upload(&a, &data).expect("upload")))
        });
        g.bench_function("cross_device", |bench| {
            bench.iter(|| wait(1, set.copy(&a, &b).expect("copy")))
        });
        g.bench_function("same_device", |bench| {
            bench.iter(|| wait(0, set.copy(&a, &a2).expect("copy")))
        });
        g.finish();
        assert_eq!(set.download::<u8>(&b).expect("download"), data);
        for t in [a, b, a2] {
            set.free(t).expect("free");
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
