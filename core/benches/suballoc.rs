//! Sub-allocator benchmark: tensormem's TLSF and buddy against the `offset-allocator` and `xalloc`
//! crates on the same seeded traces, in the same run (issues 2 and 45).
//!
//! * **steady state**: a 16 GiB range warmed to 50 % expected load with sizes log-uniform in
//!   256 B .. 64 MiB (multiples of 256), then 100 000 pairs of (free a uniformly random live
//!   region, allocate a new one). Criterion times one batch of 100 000 pairs; divide by 100 000 for
//!   ns per pair. `noop_harness` runs the same harness with an allocator that does nothing: the
//!   overhead every other line includes.
//! * **steady state at 85 %**: the same churn nearer the packing limit.
//! * **ramp to failure**: allocate without freeing until the first refusal, both from an empty
//!   range and from the fragmented state the steady-state trace leaves. The load reached
//!   (live requested bytes / capacity) is printed to stderr, since criterion measures time only.
//! * **summary**: every allocator times the 50 % churn, the 85 % churn and the ramp from empty,
//!   interleaved round by round (best of `ROUNDS`), printed with ratios to ours.
//! * **high load**: the same churn at 90 % expected load; prints how many allocations were refused
//!   and how many of those had enough free bytes in total (refused only because of
//!   fragmentation): the packing metric that the ramp barely separates.
//! * **internal fragmentation** ([`fragmentation`]): the pool traces replayed on TLSF and buddy,
//!   bytes held against bytes requested.
//!
//! The trace is the `rand_logu` algorithm of `shared/data/traces/gen/tracegen.py` with a seeded
//! xorshift generator instead of Python's (same distribution, different draws).
//! `offset-allocator` counts in `u32` units, so it runs in 256-byte units (sizes are multiples of
//! 256). Ours allocates with `align = 256` (buddy's smallest block is 256 B too); xalloc uses its
//! unaligned `alloc`.
//!
//! Run: `cargo bench -p tensormem --bench suballoc -- --warm-up-time 1 --measurement-time 3`.

// `criterion_group!` generates an undocumented public function; a benchmark whose allocator
// reports an error has no number to give, so it stops there (unwrap).
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

#[path = "suballoc/fragmentation.rs"]
mod fragmentation;
#[path = "suballoc/peers.rs"]
mod peers;
#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

use peers::{Noop, Offset, OursBuddy, OursTlsf, Sub, Xalloc};

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
/// Expected load of the second timed churn.
const MID_LOAD: f64 = 0.85;
/// Expected load of the high-load packing trace.
const HIGH_LOAD: f64 = 0.9;

impl Rng {
    /// Log-uniform size in [LO, HI], rounded up to a multiple of UNIT.
    fn size(&mut self) -> u64 {
        self.log_uniform(LO, HI).div_ceil(UNIT) * UNIT
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

    /// Frees every live region.
    fn free_all(&mut self) {
        for (h, _) in self.live.drain(..).flatten() {
            self.sub.free(h);
        }
        self.live_bytes = 0;
    }

    /// Allocates ramp sizes without freeing until the first refusal; returns the load reached.
    #[inline(never)]
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
    bench_one::<OursTlsf>(&mut group, "tensormem_tlsf", &trace);
    bench_one::<OursBuddy>(&mut group, "tensormem_buddy", &trace);
    bench_one::<Offset>(&mut group, "offset_allocator", &trace);
    bench_one::<Xalloc>(&mut group, "xalloc_tlsf", &trace);
    bench_one::<Noop>(&mut group, "noop_harness", &trace);
    group.finish();
}

/// Rounds of the summary's timings. Each round times every allocator on every workload back to
/// back and the summary keeps each one's best round, so a burst of load on a shared machine hits
/// all of them alike instead of one allocator's whole measurement.
const ROUNDS: usize = 15;

/// CPU time this thread has consumed, in ns. The summary times with it rather than the wall clock:
/// on a loaded machine a 5 ms run is almost always preempted, and the wall clock would count the
/// other processes' slices.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; CLOCK_THREAD_CPUTIME_ID is supported on every
    // Linux the benchmark runs on, and on failure `ts` stays zero (a visible 0 ns, not UB).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One round of the timed workloads for `S`: ns per pair of the churn at 50 % and at 85 % load, and
/// ns per allocation of the ramp from empty to the first refusal.
fn timed_round<S: Sub>(t50: &Trace, t85: &Trace) -> [f64; 3] {
    let churn = |trace: &Trace| {
        let mut run = Run::<S>::warm(trace);
        let start = thread_cpu_ns();
        run.churn(&trace.pairs);
        (thread_cpu_ns() - start) as f64 / PAIRS as f64
    };
    // The timed ramp runs on an allocator that has ramped once and freed everything: it measures
    // the allocation path, not the first touch of metadata that offset-allocator pre-faults when
    // it is created and the others grow on demand.
    let mut ramp = Run::<S>::empty();
    ramp.ramp(&t50.ramp);
    ramp.free_all();
    let start = thread_cpu_ns();
    ramp.ramp(&t50.ramp);
    let ramp_ns = (thread_cpu_ns() - start) as f64 / ramp.live.len().max(1) as f64;
    [churn(t50), churn(t85), ramp_ns]
}

/// Best-of-[`ROUNDS`] timings of every allocator, interleaved round by round, in the order ours,
/// buddy, offset-allocator, xalloc, noop harness.
fn best_timings(t50: &Trace, t85: &Trace) -> [[f64; 3]; 5] {
    let mut best = [[f64::MAX; 3]; 5];
    for _ in 0..ROUNDS {
        let round = [
            timed_round::<OursTlsf>(t50, t85),
            timed_round::<OursBuddy>(t50, t85),
            timed_round::<Offset>(t50, t85),
            timed_round::<Xalloc>(t50, t85),
            timed_round::<Noop>(t50, t85),
        ];
        for (b, r) in best.iter_mut().zip(round) {
            for (b, r) in b.iter_mut().zip(r) {
                *b = b.min(r);
            }
        }
    }
    best
}

/// Refusals during a churn (at 50 % load there should be none; refused pairs are cheap, so a
/// churn with refusals times less work).
fn churn_failures<S: Sub>(trace: &Trace) -> usize {
    let mut run = Run::<S>::warm(trace);
    run.churn(&trace.pairs);
    run.failures
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

/// One allocator's line of the summary: its name and times, the churn refusals on the 50 % and
/// 85 % traces, the ramp loads and the high-load refusals (of `[50 %, 85 %, 90 %]` traces).
type Row = (
    &'static str,
    [f64; 3],
    [usize; 2],
    (f64, f64),
    (usize, usize),
);

fn row<S: Sub>(name: &'static str, times: [f64; 3], [trace, mid, high]: [&Trace; 3]) -> Row {
    (
        name,
        times,
        [churn_failures::<S>(trace), churn_failures::<S>(mid)],
        ramp_loads::<S>(trace),
        high_load_refusals::<S>(high),
    )
}

/// Prints, for every allocator, the best-of-rounds times of the three workloads (net of the noop
/// harness, and as a ratio to ours), the ramp loads and the high-load refusals.
fn summary(_c: &mut Criterion) {
    let trace = Trace::new(0x5EED, LOAD);
    let mid = Trace::new(0x5EED, MID_LOAD);
    let high = Trace::new(0x5EED, HIGH_LOAD);
    let times = best_timings(&trace, &mid);
    let noop = times[4];
    let rows = [
        row::<OursTlsf>("tensormem_tlsf", times[0], [&trace, &mid, &high]),
        row::<OursBuddy>("tensormem_buddy", times[1], [&trace, &mid, &high]),
        row::<Offset>("offset_allocator", times[2], [&trace, &mid, &high]),
        row::<Xalloc>("xalloc_tlsf", times[3], [&trace, &mid, &high]),
    ];
    let net = |t: [f64; 3]| [t[0] - noop[0], t[1] - noop[1], t[2] - noop[2]];
    let ours = net(rows[0].1);
    eprintln!("\nsuballoc summary (16 GiB, sizes 256 B..64 MiB log-uniform, seed 0x5EED)");
    eprintln!(
        "  ns per pair (churn) or per allocation (ramp), thread CPU time, best of {ROUNDS} interleaved rounds, net of \
         the noop harness ({:.1} / {:.1} / {:.1} ns); (x) = ratio to ours",
        noop[0], noop[1], noop[2]
    );
    eprintln!(
        "  {:<17} {:>16} {:>16} {:>16} {:>11} {:>13} {:>24}",
        "allocator",
        "churn 50%",
        "churn 85%",
        "ramp to failure",
        "ramp empty",
        "ramp churned",
        "90% load refused / frag"
    );
    for (name, t, failures, (empty, churned), (refused, fragmented)) in rows {
        let t = net(t);
        let cell = |i: usize| format!("{:.1} ({:.2}x)", t[i], t[i] / ours[i]);
        eprintln!(
            "  {name:<17} {:>16} {:>16} {:>16} {:>10.3}% {:>12.3}% {:>15} / {:<8}{}",
            cell(0),
            cell(1),
            cell(2),
            empty * 100.0,
            churned * 100.0,
            refused,
            fragmented,
            if failures != [0, 0] {
                format!(
                    "  (refused pairs at 50% / 85% load: {} / {})",
                    failures[0], failures[1]
                )
            } else {
                String::new()
            }
        );
    }
    // The bar: ours at most 0.95 of the faster crate on every workload, in this run.
    let faster = |i: usize| net(rows[2].1)[i].min(net(rows[3].1)[i]);
    eprintln!(
        "  ours / faster crate: churn 50% {:.2}, churn 85% {:.2}, ramp {:.2} (target <= 0.95)",
        ours[0] / faster(0),
        ours[1] / faster(1),
        ours[2] / faster(2)
    );
    eprintln!();
    fragmentation::print();
    eprintln!();
}

criterion_group!(benches, steady_state, summary);
criterion_main!(benches);
