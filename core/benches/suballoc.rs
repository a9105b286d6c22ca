//! Sub-allocator benchmark: tensormem's TLSF against the `offset-allocator` and `xalloc` crates on
//! the same seeded traces, in the same run (issue 2, "Benchmark").
//!
//! * **steady state**: a 16 GiB range warmed to 50 % expected load with sizes log-uniform in
//!   256 B .. 64 MiB (multiples of 256), then 100 000 pairs of (free a uniformly random live
//!   region, allocate a new one). Criterion times one batch of 100 000 pairs; divide by 100 000 for
//!   ns per pair. `noop_harness` runs the same harness with an allocator that does nothing: the
//!   overhead every other line includes.
//! * **ramp to failure**: allocate without freeing until the first refusal, both from an empty
//!   range and from the fragmented state the steady-state trace leaves. The load reached
//!   (live requested bytes / capacity) is printed to stderr, since criterion measures time only.
//! * **high load**: the same churn at 90 % expected load; prints how many allocations were refused
//!   and how many of those had enough free bytes in total (refused only because of
//!   fragmentation): the packing metric that the ramp barely separates.
//!
//! The trace is the `rand_logu` algorithm of `shared/data/traces/gen/tracegen.py` with a seeded
//! xorshift generator instead of Python's (same distribution, different draws).
//! `offset-allocator` counts in `u32` units, so it runs in 256-byte units (sizes are multiples of
//! 256). Ours allocates with `align = 256`; xalloc uses its unaligned `alloc`.
//!
//! Run: `cargo bench -p tensormem --bench suballoc -- --warm-up-time 1 --measurement-time 3`.

// `criterion_group!` generates an undocumented public function; a benchmark whose allocator
// reports an error has no number to give, so it stops there (unwrap).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

/// Size of the managed range: 16 GiB.
const CAPACITY: u64 = 16 << 30;
/// Smallest request.
const LO: u64 = 256;
/// Largest request.
const HI: u64 = 64 << 20;
/// Granule: every size is a multiple; offset-allocator's unit.
const UNIT: u64 = 256;
/// Free + allocate pairs in the steady-state trace.
const PAIRS: usize = 100_000;
/// Expected load during the steady state.
const LOAD: f64 = 0.5;
/// Expected load of the high-load packing trace.
const HIGH_LOAD: f64 = 0.9;

/// xorshift64*: tiny, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-uniform size in [LO, HI], rounded up to a multiple of UNIT.
    fn size(&mut self) -> u64 {
        let (a, b) = ((LO as f64).ln(), (HI as f64).ln());
        let s = ((a + self.unit() * (b - a)).exp() as u64).max(LO);
        s.div_ceil(UNIT) * UNIT
    }
}

/// A seeded `rand_logu` trace: warm-up sizes, then (victim slot, new size) pairs.
struct Trace {
    warm: Vec<u64>,
    pairs: Vec<(usize, u64)>,
    /// Sizes for ramping until failure.
    ramp: Vec<u64>,
}

impl Trace {
    fn new(seed: u64, load: f64) -> Self {
        let mut rng = Rng(seed);
        let mean = (HI - LO) as f64 / (HI as f64 / LO as f64).ln();
        let live = (load * CAPACITY as f64 / mean) as usize;
        let warm = (0..live).map(|_| rng.size()).collect();
        let pairs = (0..PAIRS)
            .map(|_| ((rng.next_u64() % live as u64) as usize, rng.size()))
            .collect();
        // Enough sizes to fill the whole range many times over.
        let ramp = (0..8 * live).map(|_| rng.size()).collect();
        Trace { warm, pairs, ramp }
    }
}

/// The operations the harness needs from an allocator.
trait Sub {
    type Handle;
    fn create() -> Self;
    fn alloc(&mut self, size: u64) -> Option<Self::Handle>;
    fn free(&mut self, handle: Self::Handle);
}

/// tensormem's TLSF.
struct Ours(tensormem::suballoc::Tlsf);

impl Sub for Ours {
    type Handle = tensormem::suballoc::Region;
    fn create() -> Self {
        Ours(tensormem::suballoc::Tlsf::new(CAPACITY).unwrap())
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.allocate(size, UNIT).unwrap()
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle).unwrap();
    }
}

/// `offset-allocator` (sebbbi's OffsetAllocator), in 256-byte units.
struct Offset(offset_allocator::Allocator);

impl Sub for Offset {
    type Handle = offset_allocator::Allocation;
    fn create() -> Self {
        Offset(offset_allocator::Allocator::new((CAPACITY / UNIT) as u32))
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.allocate((size / UNIT) as u32)
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle);
    }
}

/// `xalloc`'s TLSF with system-allocated block metadata.
struct Xalloc(xalloc::SysTlsf<u64>);

impl Sub for Xalloc {
    type Handle = xalloc::SysTlsfRegion;
    fn create() -> Self {
        Xalloc(xalloc::SysTlsf::with_capacity(CAPACITY, 4096))
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.alloc(size).map(|(region, _offset)| region)
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.dealloc(handle).unwrap();
    }
}

/// Does nothing: the harness overhead (trace walk, live-slot bookkeeping) alone.
struct Noop;

impl Sub for Noop {
    type Handle = u64;
    fn create() -> Self {
        Noop
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<u64> {
        Some(black_box(size))
    }
    #[inline]
    fn free(&mut self, handle: u64) {
        black_box(handle);
    }
}

/// Live regions of a run, with their sizes, so the harness computes the load the same way for
/// every allocator.
struct Run<S: Sub> {
    sub: S,
    live: Vec<Option<(S::Handle, u64)>>,
    live_bytes: u64,
    /// Refused allocations.
    failures: usize,
    /// Refused allocations although the free bytes (capacity - live bytes) were enough.
    fragmented: usize,
}

impl<S: Sub> Run<S> {
    fn empty() -> Self {
        Run {
            sub: S::create(),
            live: Vec::new(),
            live_bytes: 0,
            failures: 0,
            fragmented: 0,
        }
    }

    /// A fresh allocator warmed up with the trace's initial allocations.
    fn warm(trace: &Trace) -> Self {
        let mut run = Self::empty();
        run.live.reserve(trace.warm.len());
        for &size in &trace.warm {
            match run.sub.alloc(size) {
                Some(h) => {
                    run.live_bytes += size;
                    run.live.push(Some((h, size)));
                }
                None => {
                    run.refused(size);
                    run.live.push(None);
                }
            }
        }
        run
    }

    fn refused(&mut self, size: u64) {
        self.failures += 1;
        if CAPACITY - self.live_bytes >= size {
            self.fragmented += 1;
        }
    }

    /// The steady-state pairs: free the victim, allocate the new size in its slot.
    #[inline(never)]
    fn churn(&mut self, pairs: &[(usize, u64)]) {
        for &(victim, size) in pairs {
            if let Some((h, old)) = self.live[victim].take() {
                self.sub.free(h);
                self.live_bytes -= old;
            }
            match self.sub.alloc(size) {
                Some(h) => {
                    self.live[victim] = Some((h, size));
                    self.live_bytes += size;
                }
                None => self.refused(size),
            }
        }
    }

    /// Allocates ramp sizes without freeing until the first refusal; returns the load reached.
    fn ramp(&mut self, sizes: &[u64]) -> f64 {
        for &size in sizes {
            match self.sub.alloc(size) {
                Some(h) => {
                    self.live_bytes += size;
                    self.live.push(Some((h, size)));
                }
                None => break,
            }
        }
        self.live_bytes as f64 / CAPACITY as f64
    }
}

/// Registers one allocator's steady-state benchmark.
fn bench_one<S: Sub>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    trace: &Trace,
) {
    group.bench_function(name, |b| {
        b.iter_batched(
            || Run::<S>::warm(trace),
            |mut run| {
                run.churn(&trace.pairs);
                run
            },
            BatchSize::PerIteration,
        )
    });
}

fn steady_state(c: &mut Criterion) {
    let trace = Trace::new(0x5EED, LOAD);
    let mut group = c.benchmark_group("steady_state_50pct_16GiB_100k_pairs");
    group.throughput(Throughput::Elements(PAIRS as u64));
    group.sample_size(20);
    bench_one::<Ours>(&mut group, "tensormem_tlsf", &trace);
    bench_one::<Offset>(&mut group, "offset_allocator", &trace);
    bench_one::<Xalloc>(&mut group, "xalloc_tlsf", &trace);
    bench_one::<Noop>(&mut group, "noop_harness", &trace);
    group.finish();
}

/// Best-of-5 ns per pair, for the summary line (criterion's numbers above are the reference).
fn ns_per_pair<S: Sub>(trace: &Trace) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut failures = 0;
    for _ in 0..5 {
        let mut run = Run::<S>::warm(trace);
        let start = Instant::now();
        run.churn(&trace.pairs);
        best = best.min(start.elapsed().as_nanos() as f64 / PAIRS as f64);
        failures = run.failures;
    }
    (best, failures)
}

/// Ramp loads (from empty, after the steady-state churn).
fn ramp_loads<S: Sub>(trace: &Trace) -> (f64, f64) {
    let from_empty = Run::<S>::empty().ramp(&trace.ramp);
    let mut churned = Run::<S>::warm(trace);
    churned.churn(&trace.pairs);
    let after_churn = churned.ramp(&trace.ramp);
    (from_empty, after_churn)
}

/// Refusals in a steady state at 90 % expected load: (all refusals, refusals although enough bytes
/// were free in total). The second number is the packing metric of the brief's §6.
fn high_load_refusals<S: Sub>(trace: &Trace) -> (usize, usize) {
    let mut run = Run::<S>::warm(trace);
    run.churn(&trace.pairs);
    (run.failures, run.fragmented)
}

/// Prints the ramp loads, the high-load refusals and a ns-per-pair summary with ratios for every
/// allocator.
fn summary(_c: &mut Criterion) {
    let trace = Trace::new(0x5EED, LOAD);
    let high = Trace::new(0x5EED, HIGH_LOAD);
    let noop = ns_per_pair::<Noop>(&trace).0;
    let rows = [
        (
            "tensormem_tlsf",
            ns_per_pair::<Ours>(&trace),
            ramp_loads::<Ours>(&trace),
            high_load_refusals::<Ours>(&high),
        ),
        (
            "offset_allocator",
            ns_per_pair::<Offset>(&trace),
            ramp_loads::<Offset>(&trace),
            high_load_refusals::<Offset>(&high),
        ),
        (
            "xalloc_tlsf",
            ns_per_pair::<Xalloc>(&trace),
            ramp_loads::<Xalloc>(&trace),
            high_load_refusals::<Xalloc>(&high),
        ),
    ];
    let ours = rows[0].1.0 - noop;
    eprintln!("\nsuballoc summary (16 GiB, sizes 256 B..64 MiB log-uniform, seed 0x5EED)");
    eprintln!("  ns/pair: best of 5 runs of 100k pairs; harness overhead (noop) {noop:.1} ns/pair");
    eprintln!(
        "  {:<17} {:>8} {:>8} {:>8} {:>11} {:>13} {:>24}",
        "allocator",
        "ns/pair",
        "net",
        "vs ours",
        "ramp empty",
        "ramp churned",
        "90% load refused / frag"
    );
    for (name, (ns, failures), (empty, churned), (refused, fragmented)) in rows {
        let net = ns - noop;
        eprintln!(
            "  {name:<17} {ns:>8.1} {net:>8.1} {:>7.2}x {:>10.3}% {:>12.3}% {:>15} / {:<8}{}",
            net / ours,
            empty * 100.0,
            churned * 100.0,
            refused,
            fragmented,
            if failures > 0 {
                format!("  ({failures} refusals at 50% load)")
            } else {
                String::new()
            }
        );
    }
    eprintln!();
}

criterion_group!(benches, steady_state, summary);
criterion_main!(benches);
