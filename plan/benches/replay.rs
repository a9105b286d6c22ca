//! Record and replay against a dynamic allocator, on a repeated transformer-like step.
//!
//! Per run of the same allocation sequence: the replayer (O(1) per event, offsets planned once),
//! the crate's TLSF sub-allocator serving the same events dynamically, and a no-op walk of the
//! events (the floor). Throughput is per allocation. Before the timings the bench prints the
//! reserved bytes each approach needs: the planned arena, TLSF's high-water mark, and the lower
//! bound. Run: `cargo bench -p tensormem-plan --bench replay`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::panic,
    reason = "benchmark driver: a failure aborts the run"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tensormem_plan::plan::recording::{Event, Recorder, Recording, ReplayPlan, Step};
use tensormem_plan::suballoc::{Region, Tlsf};

/// One decoder step: per layer q, k, v, scores, attention output, MLP hidden, residual; nested
/// frees as an eager framework would issue them.
fn transformer_step(layers: usize, seq: u64, d_model: u64) -> Recording {
    let mut r = Recorder::new();
    let act = seq * d_model * 2;
    let mut x = r.allocate(act, 256).unwrap();
    for _ in 0..layers {
        let norm = r.allocate(act, 256).unwrap();
        let q = r.allocate(act, 256).unwrap();
        let k = r.allocate(act / 4, 256).unwrap();
        let v = r.allocate(act / 4, 256).unwrap();
        r.free(norm).unwrap();
        let s = r.allocate(seq * seq * 2 * 8, 256).unwrap();
        r.free(q).unwrap();
        r.free(k).unwrap();
        let a = r.allocate(act, 256).unwrap();
        r.free(s).unwrap();
        r.free(v).unwrap();
        let x2 = r.allocate(act, 256).unwrap();
        r.free(a).unwrap();
        r.free(x).unwrap();
        let h = r.allocate(act * 4, 256).unwrap();
        let g = r.allocate(act * 4, 256).unwrap();
        r.free(h).unwrap();
        let y = r.allocate(act, 256).unwrap();
        r.free(g).unwrap();
        r.free(x2).unwrap();
        x = y;
    }
    r.free(x).unwrap();
    r.finish()
}

/// Serves the events with TLSF; returns the high-water mark of `offset + size`.
fn run_tlsf(tlsf: &mut Tlsf, events: &[Event], regions: &mut Vec<Option<Region>>) -> u64 {
    regions.clear();
    let mut high = 0;
    for e in events {
        match *e {
            Event::Allocate { size, align } => {
                let r = tlsf.allocate(size, align).unwrap().unwrap();
                high = high.max(r.offset + r.size);
                regions.push(Some(r));
            }
            Event::Free { ordinal } => tlsf
                .free(regions[ordinal as usize].take().unwrap())
                .unwrap(),
        }
    }
    high
}

fn bench(c: &mut Criterion) {
    let rec = transformer_step(32, 512, 4096);
    let plan = std::sync::Arc::new(ReplayPlan::compile(&rec, Duration::from_secs(2)).unwrap());
    let events = rec.events().to_vec();
    let allocations = rec.allocations() as u64;
    let mut tlsf = Tlsf::new(1 << 40).unwrap();
    let mut regions = Vec::new();
    let tlsf_high = run_tlsf(&mut tlsf, &events, &mut regions);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "reserved bytes for one step ({} allocations): planned arena {:.1} MiB ({}), TLSF high-water {:.1} MiB, lower bound {:.1} MiB",
        allocations,
        mib(plan.arena_size()),
        plan.algorithm(),
        mib(tlsf_high),
        mib(plan.lower_bound())
    );

    let mut g = c.benchmark_group("replay_step");
    g.throughput(Throughput::Elements(allocations));
    g.bench_function("noop_walk", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for e in black_box(&events) {
                if let Event::Allocate { size, .. } = e {
                    sum = sum.wrapping_add(*size);
                }
            }
            sum
        })
    });
    g.bench_function("replayer", |b| {
        b.iter(|| {
            let mut rep = plan.replayer();
            let mut sum = 0u64;
            for e in black_box(&events) {
                match *e {
                    Event::Allocate { size, align } => {
                        if let Step::Planned { offset, .. } = rep.allocate(size, align) {
                            sum = sum.wrapping_add(offset);
                        }
                    }
                    Event::Free { ordinal } => {
                        rep.free(ordinal);
                    }
                }
            }
            assert!(rep.complete());
            sum
        })
    });
    g.bench_function("tlsf_dynamic", |b| {
        b.iter(|| run_tlsf(&mut tlsf, black_box(&events), &mut regions))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
