//! Pool trace replay (issue 14): five allocation traces (and `xfmr_eager_sdpa`, its eager
//! trace with attention scores quadratic in the sequence) through tensormem's dynamic pool and
//! through cubecl's memory management, in one process, over devices that only count.
//!
//! For each trace it prints peak reserved ÷ peak live (live = bytes the trace requested) for our
//! pool in place, our pool on blocks and cubecl; the reservations each made from its device; and
//! the time per allocate+free pair as a ratio to cubecl's: thread CPU time of a whole replay
//! divided by its allocations, each short stretch of the trace at its fastest of `--replays`
//! warm replays per pool taken in turns with every other pool's, with the spread of the
//! replays (`timing.rs`). Our pools are timed over a
//! device whose holes calls return at once (`CountingBackend::without_books`): the pool's own
//! time, since the counting device's bookkeeping models no driver's cost; a line under each
//! trace gives the holes row's time with the books kept, and the difference, the device's
//! share. The record-and-replay pool runs too (steps marked where the trace repeats a model run:
//! gpt2s_train, llama8b_prefill and mobilenet_v2 by iteration, the eager traces by prefill; rand_logu
//! has none), over our pool with holes and over our pool on blocks (the path of wgpu, lavapipe
//! and the browser), with the share of
//! allocations it served from plans and its steady state: peak reserved from the first plan on,
//! over the arena the plans need. It writes one SVG per trace: live bytes and each pool's
//! reserved bytes over the events. Under each trace it also prints the peak of exact best fit
//! over the same growing range (`best_fit.rs`): the placement bound of the in-place column.
//!
//! The traces and how they are made are in `traces.rs`; the pools and the counting devices, and
//! why counting devices, in `peers.rs`.
//!
//! Run: `cargo bench -p tensormem --bench pool_traces -- [--replays N] [--svg-dir DIR]
//! [--trace NAME]... [--granularity BYTES]` (SVGs default to `target/pool_traces/`). Exit code 0
//! on success, 1 when a pool fails a request or a file cannot be written, 2 for bad arguments.

mod best_fit;
mod counting;
mod peers;
#[path = "../support/rng.rs"]
mod rng;
mod svg;
#[path = "../support/thread_cpu.rs"]
#[allow(
    dead_code,
    reason = "replays are timed whole, without criterion's ThreadCpu"
)]
mod thread_cpu;
mod timing;
mod traces;

use std::path::PathBuf;
use std::process::ExitCode;

use peers::{Cubecl, Ours, Peer};
use thread_cpu::thread_cpu_ns;
use timing::Samples;

/// Our pool on a device that grows blocks in place and decommits and remaps holes (the host,
/// CUDA's virtual memory management).
type Holes = Ours<2>;
/// The same without learned placement (`ArenaConfig::learned_placement` off): placed by TLSF.
type Unlearned = Ours<3>;
/// Our pool on a device that grows blocks in place at their end only (before holes).
type InPlace = Ours<1>;
/// Our pool on a device that cannot: the fallback of adding blocks.
type Blocks = Ours<0>;
/// The record-and-replay pool over our pool with holes.
type Replay = peers::Replay<2>;
/// The record-and-replay pool over our pool on blocks (wgpu, lavapipe, the browser).
type ReplayBlocks = peers::Replay<0>;
use traces::Trace;

/// What one replay of a trace through one pool measured.
struct Replayed {
    peak_reserved: u64,
    reserves: u64,
    releases: u64,
    maps: u64,
    unmaps: u64,
    /// Bytes held by the device after each event (recorded replays only).
    held: Vec<u64>,
}

/// The chart series of one pool's replay: its reserved bytes after every event, labelled with
/// its peak over `peak_live`.
fn reserved_series<'a>(
    name: &str,
    colour: &'static str,
    r: &'a Replayed,
    peak_live: u64,
) -> svg::Series<'a> {
    let ratio = r.peak_reserved as f64 / peak_live as f64;
    svg::Series {
        label: format!("{name} reserved (peak {ratio:.3}x live)"),
        colour,
        values: &r.held,
    }
}

/// Runs `trace` through `pool`, marking its steps; calls `after` after every event.
fn drive<P: Peer>(pool: &mut P, trace: &Trace, mut after: impl FnMut(&P)) -> Result<(), String> {
    let err = |e: String| format!("{} on {}: {e}", P::NAME, trace.name);
    let mut steps = trace.steps.iter().peekable();
    let mut in_step = false;
    for (i, e) in trace.events.iter().enumerate() {
        if steps.next_if(|s| **s == i).is_some() {
            if in_step {
                pool.end_step().map_err(err)?;
            }
            pool.begin_step().map_err(err)?;
            in_step = true;
        }
        if e.alloc {
            pool.alloc(e.id, e.size)
        } else {
            pool.free(e.id)
        }
        .map_err(err)?;
        after(pool);
    }
    if in_step {
        pool.end_step().map_err(err)?;
    }
    Ok(())
}

/// Replays `trace` through a fresh `P` and records the device's holding after every event.
fn replay<P: Peer>(trace: &Trace) -> Result<(Replayed, P), String> {
    let mut pool = P::create();
    let mut held = Vec::with_capacity(trace.events.len());
    let mut broken = None;
    drive(&mut pool, trace, |p| {
        held.push(p.counters().held());
        // The pool's accounting against the device's, now and then (it walks every block).
        if held.len() % 1009 == 0 && broken.is_none() {
            broken = p.check().err();
        }
    })?;
    if let Some(e) = broken.or_else(|| pool.check().err()) {
        return Err(format!("{} on {}: {e}", P::NAME, trace.name));
    }
    let c = pool.counters();
    let r = Replayed {
        peak_reserved: c.peak(),
        reserves: c.reserves(),
        releases: c.releases(),
        maps: c.maps(),
        unmaps: c.unmaps(),
        held,
    };
    Ok((r, pool))
}

/// Times one replay of `trace` through a fresh `P` (pool creation and drop excluded) in
/// segments of [`timing::SEGMENT`] events, into `samples`; over a device that keeps no books
/// where the pool calls it often ([`Peer::create_timed`]), or over the counting device when
/// `books`.
fn timed<P: Peer>(trace: &Trace, books: bool, samples: &mut Samples) -> Result<(), String> {
    let mut pool = if books {
        P::create()
    } else {
        P::create_timed()
    };
    let mut marks = Vec::with_capacity(trace.events.len() / timing::SEGMENT + 2);
    let mut events = 0;
    marks.push(thread_cpu_ns());
    drive(&mut pool, trace, |_| {
        events += 1;
        if events % timing::SEGMENT == 0 {
            marks.push(thread_cpu_ns());
        }
    })?;
    marks.push(thread_cpu_ns());
    drop(pool);
    samples.add(&marks);
    Ok(())
}

const USAGE: &str = "usage: pool_traces [--replays N] [--svg-dir DIR] [--trace NAME]... \
    [--granularity BYTES]\n\
    --replays: timed replays of each trace per pool, taken in turns (default 30)\n\
    --granularity: mapping unit of the in-place device (a power of two; default 2 MiB, CUDA's)\n\
    traces: rand_logu xfmr_eager gpt2s_train llama8b_prefill mobilenet_v2 xfmr_eager_sdpa\n\
    exit codes: 0 success, 1 a pool failed a request or a file could not be written, 2 bad arguments";

struct Args {
    replays: u32,
    svg_dir: PathBuf,
    only: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        replays: 30,
        svg_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/pool_traces"),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            // What `cargo bench` passes to every harness.
            "--bench" => {}
            "--replays" => {
                args.replays = value("--replays")?
                    .parse()
                    .ok()
                    .filter(|r| *r > 0)
                    .ok_or("--replays wants a positive integer")?;
            }
            "--svg-dir" => args.svg_dir = value("--svg-dir")?.into(),
            "--trace" => args.only.push(value("--trace")?),
            "--granularity" => {
                let g = value("--granularity")?
                    .parse::<u64>()
                    .ok()
                    .filter(|g| g.is_power_of_two() && *g >= 256)
                    .ok_or("--granularity wants a power of two of at least 256 bytes")?;
                peers::set_granularity(g);
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pool_traces: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let mut traces = traces::all()?;
    if !args.only.is_empty() {
        if let Some(bad) = args
            .only
            .iter()
            .find(|n| !traces.iter().any(|t| t.name == n.as_str()))
        {
            return Err(format!("no trace named '{bad}'"));
        }
        traces.retain(|t| args.only.iter().any(|n| n == t.name));
    }
    std::fs::create_dir_all(&args.svg_dir)
        .map_err(|e| format!("creating {}: {e}", args.svg_dir.display()))?;
    println!(
        "pool trace replay: peak reserved / peak live (reserved = bytes backed by memory: on the \
         holes path the peak of committed granules), physical allocations the device creates \
         (reserves), mappings made and removed, thread CPU ns per allocate+free pair (of {} \
         warm replays per pool, the pools taking turns, each stretch of {} events at its fastest), \
         the spread (the median whole replay ÷ that − 1) and the ratio to cubecl's.\nThe in-place devices model {}",
        args.replays,
        timing::SEGMENT,
        if peers::granularity() < peers::GRANULARITY {
            format!(
                "the host ({} KiB pages): the reservation is the one creation, growth one \
                 mprotect, a decommit or remap one madvise, a commit no call",
                peers::granularity() >> 10
            )
        } else {
            format!(
                "CUDA ({} KiB granules): one cuMemCreate and cuMemMap per call that backs \
                 memory (a growth, a commit: one unit), decommits and remaps of whole units \
                 only (the model refuses a range that cuts one); a remap unmaps and maps each \
                 unit, creating nothing",
                peers::granularity() >> 10
            )
        }
    );
    const POOLS: usize = 7;
    // The last timed replay: the holes row again, over the counting device's books.
    const BOOKS: usize = POOLS;
    for trace in &traces {
        let live = trace.live();
        let peak_live = live.iter().copied().max().unwrap_or(0).max(1);
        let (holes, _) = replay::<Holes>(trace)?;
        let (unlearned, _) = replay::<Unlearned>(trace)?;
        let (in_place, _) = replay::<InPlace>(trace)?;
        let (blocks, _) = replay::<Blocks>(trace)?;
        let (replayed, pool) = replay::<Replay>(trace)?;
        let (replayed_blocks, pool_blocks) = replay::<ReplayBlocks>(trace)?;
        let (cubecl, _) = replay::<Cubecl>(trace)?;
        let mut samples: [Samples; POOLS + 1] = Default::default();
        let mut warm_up: [Samples; POOLS + 1] = Default::default();
        // One warm-up replay per pool (caches, the allocator's free lists), then the timed ones.
        for round in 0..=args.replays {
            let into = if round == 0 {
                &mut warm_up
            } else {
                &mut samples
            };
            // Rotate who goes first, so none always runs on a warmer cache.
            for k in 0..=POOLS {
                let who = (round as usize + k) % (POOLS + 1);
                let s = &mut into[who];
                match who {
                    0 => timed::<Holes>(trace, false, s)?,
                    1 => timed::<Unlearned>(trace, false, s)?,
                    2 => timed::<InPlace>(trace, false, s)?,
                    3 => timed::<Blocks>(trace, false, s)?,
                    4 => timed::<Replay>(trace, false, s)?,
                    5 => timed::<ReplayBlocks>(trace, false, s)?,
                    BOOKS => timed::<Holes>(trace, true, s)?,
                    _ => timed::<Cubecl>(trace, false, s)?,
                }
            }
        }
        let ns = samples.each_ref().map(|s| s.best(trace.allocations));
        let spread = samples
            .each_ref()
            .map(|s| 100.0 * s.spread(trace.allocations));
        let ratio = |r: &Replayed| r.peak_reserved as f64 / peak_live as f64;
        let mut best = best_fit::BestFit::default();
        for e in &trace.events {
            if e.alloc {
                best.alloc(e.id, e.size);
            } else {
                best.free(e.id)?;
            }
        }
        println!(
            "\n{} ({} allocations, peak live {}): {}",
            trace.name,
            trace.allocations,
            mib(peak_live),
            trace.what
        );
        println!(
            "    {:<28} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9}",
            "pool",
            "peak/live",
            "reserves",
            "releases",
            "maps",
            "unmaps",
            "ns/pair",
            "spread",
            "t/cubecl"
        );
        let rows = [
            (Holes::NAME, &holes),
            (Unlearned::NAME, &unlearned),
            (InPlace::NAME, &in_place),
            (Blocks::NAME, &blocks),
            (Replay::NAME, &replayed),
            (ReplayBlocks::NAME, &replayed_blocks),
            (Cubecl::NAME, &cubecl),
        ];
        for (k, (name, r)) in rows.iter().enumerate() {
            println!(
                "    {:<28} {:>9.3} {:>8} {:>8} {:>8} {:>8} {:>8.1} {:>6.1}% {:>9.2}",
                name,
                ratio(r),
                r.reserves,
                r.releases,
                r.maps,
                r.unmaps,
                ns[k],
                spread[k],
                ns[k] / ns[POOLS - 1]
            );
        }
        println!(
            "    {} with the counting device's books: {:.1} ns/pair ({:+.1} for the device), \
             spread {:.1}%, t/cubecl {:.2}",
            Holes::NAME,
            ns[BOOKS],
            ns[BOOKS] - ns[0],
            spread[BOOKS],
            ns[BOOKS] / ns[POOLS - 1]
        );
        println!(
            "    exact best fit over the in-place arena's growing range: {:.3}, {} growths",
            best.peak() as f64 / peak_live as f64,
            best.growths()
        );
        println!("    {}", replay_line(&pool, &replayed, trace));
        println!("    {}", replay_line(&pool_blocks, &replayed_blocks, trace));
        let doc = svg::chart(
            &format!("{}: {}", trace.name, trace.what),
            &[
                svg::Series {
                    label: "live (requested)".into(),
                    colour: "#222",
                    values: &live,
                },
                reserved_series(Holes::NAME, "#d62728", &holes, peak_live),
                reserved_series(InPlace::NAME, "#2ca02c", &in_place, peak_live),
                reserved_series(Blocks::NAME, "#1f77b4", &blocks, peak_live),
                reserved_series(Replay::NAME, "#9467bd", &replayed, peak_live),
                reserved_series(ReplayBlocks::NAME, "#17becf", &replayed_blocks, peak_live),
                reserved_series(Cubecl::NAME, "#ff7f0e", &cubecl, peak_live),
            ],
        );
        let path = args.svg_dir.join(format!("{}.svg", trace.name));
        std::fs::write(&path, doc).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    println!("SVGs in {}", args.svg_dir.display());
    Ok(())
}

/// What the record-and-replay `pool` did on `trace` (replayed as `r`): allocations served from
/// plans, and its steady state (peak reserved from the first plan on, over the plans' arena).
fn replay_line<const M: u8>(pool: &peers::Replay<M>, r: &Replayed, trace: &Trace) -> String {
    let s = pool.stats();
    let steady = pool
        .planned_from()
        .and_then(|from| r.held[from..].iter().copied().max())
        .map_or("never planned".to_string(), |peak| {
            format!(
                "peak reserved from the first plan on {} = {:.4}x the arena the plans need ({})",
                mib(peak),
                peak as f64 / s.arena_needed.max(1) as f64,
                mib(s.arena_needed)
            )
        });
    format!(
        "{}: {} of {} allocations from plans ({:.1}%), {} plans, {} stretched, {} divergences; \
         {steady}",
        peers::Replay::<M>::NAME,
        s.planned,
        trace.allocations,
        100.0 * s.planned as f64 / trace.allocations.max(1) as f64,
        s.plans,
        s.stretched,
        s.divergences
    )
}

/// Bytes as MiB with one decimal, for the table.
fn mib(bytes: u64) -> String {
    format!("{:.1}M", bytes as f64 / f64::from(1 << 20))
}
