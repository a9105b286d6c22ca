//! The spill stress workload, on any backend: threads that each write a pattern of their own
//! into tensors of odd byte lengths, rewrite them, pin them, read back every byte of every live
//! tensor and free them, while a small budget keeps a spilling pool moving allocations to host
//! memory and back. Any byte that differs is a bad read. The suite runs it briefly (case
//! "offload: spill stress ..."); `src/bin/spill_stress.rs` runs it for longer on every target.
//! Native only: `SpillPool` blocks on its copies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tensormem::pool::{ArenaConfig, ArenaPool, SpillConfig, SpillPool};
use tensormem::{Backend, DType, DevicePool, Runtime, RuntimeConfig, Tensor};

/// Tensors each thread holds at most.
const LIVE: usize = 6;

/// Longest a run goes on past its time while nothing has spilled yet.
const SPILL_GRACE: Duration = Duration::from_secs(30);

/// What a run saw.
#[derive(Clone, Debug, Default)]
pub struct StressReport {
    /// Downloads checked byte by byte.
    pub reads: u64,
    /// Downloads with a byte that differs from what was written last.
    pub bad_reads: u64,
    /// Allocations the pool moved to host memory.
    pub spills: u64,
    /// Allocations it brought back.
    pub restores: u64,
    /// Calls that returned an error (each ends its thread's run).
    pub errors: Vec<String>,
}

/// A tensor's length in bytes: 1 to 8 KiB, most not a whole number of 4-byte words.
fn len_of(seed: u64) -> usize {
    1024 * (1 + (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize) - (seed % 3) as usize
}

fn pattern(seed: u64) -> Vec<u8> {
    (0..len_of(seed) as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)) as u8)
        .collect()
}

/// A reproducible choice per thread (xorshift).
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs `threads` threads for `time` on `backend`, with `force_staging` copies; `pins`: a
/// pin/unpin pair around every transfer.
///
/// # Errors
/// When the runtime cannot be made; errors of the workload itself are in the report.
pub fn run(
    backend: Arc<dyn Backend>,
    force_staging: bool,
    threads: u32,
    pins: bool,
    time: Duration,
) -> Result<StressReport, String> {
    let spill: Arc<OnceLock<Arc<SpillPool>>> = Arc::new(OnceLock::new());
    let keep = spill.clone();
    let config = RuntimeConfig {
        force_staging,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::with_pool(backend, config, move |b, _budget| {
        let arena = ArenaPool::new(
            b.clone(),
            ArenaConfig {
                block_size: 64 << 10,
                // Twice what the threads pin at once (8 KiB each at most), about 60% of what
                // is live: spills all the time, and pins never leave too little room.
                budget: Some(u64::from(threads) * (16 << 10)),
                in_place: false,
                ..ArenaConfig::device()
            },
        )?;
        let config = SpillConfig {
            max_wait: Duration::from_secs(10),
        };
        let pool = Arc::new(SpillPool::new(Arc::new(arena), b, config));
        let _ = keep.set(pool.clone());
        Ok(pool)
    })
    .map_err(|e| format!("runtime: {e}"))?;
    let pool = spill.get().ok_or("no spill pool")?.clone();
    let reads = AtomicU64::new(0);
    let bad = AtomicU64::new(0);
    let end = Instant::now() + time;
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (rt, pool, reads, bad) = (rt.clone(), pool.clone(), &reads, &bad);
                s.spawn(move || worker(&rt, &pool, thread, pins, end, reads, bad))
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap_or(Err("a thread panicked".into())).err())
            .collect()
    });
    let mut report = StressReport {
        reads: reads.into_inner(),
        bad_reads: bad.into_inner(),
        spills: pool.spill_stats().spills,
        restores: pool.spill_stats().restores,
        errors,
    };
    if let Err(e) = pool.check_invariants() {
        report.errors.push(e);
    }
    if let Err(e) = rt.check_leaks() {
        report.errors.push(format!("leaks: {e}"));
    }
    Ok(report)
}

fn worker(
    rt: &Runtime,
    pool: &SpillPool,
    thread: u32,
    pins: bool,
    end: Instant,
    reads: &AtomicU64,
    bad: &AtomicU64,
) -> Result<(), String> {
    let err =
        |what: &'static str| move |e: tensormem::Error| format!("thread {thread}: {what}: {e}");
    let mut x = 0x2545_F491_4F6C_DD1D ^ ((u64::from(thread) + 1) * 0x1_0000_0001);
    let mut seeds = u64::from(thread) << 40;
    let mut mine: Vec<(Tensor, u64)> = Vec::new();
    let pin = |t: &Tensor, on: bool| -> Result<(), String> {
        if !pins {
            return Ok(());
        }
        let h = t.allocation().handle;
        if on { pool.pin(h) } else { pool.unpin(h) }.map_err(err("pin"))
    };
    let check = |t: &Tensor, seed: u64| -> Result<(), String> {
        pin(t, true)?;
        let got = rt.download::<u8>(t).map_err(err("download"))?;
        pin(t, false)?;
        reads.fetch_add(1, Ordering::Relaxed);
        if got != pattern(seed) {
            bad.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    // Past `end`, the threads go on until the pool has spilled (a slow or loaded device may
    // not have filled the budget yet), for at most `SPILL_GRACE` more.
    let grace_end = end + SPILL_GRACE;
    let go_on = || {
        let now = Instant::now();
        now < end || (now < grace_end && pool.spill_stats().spills == 0)
    };
    let mut result = Ok(());
    while result.is_ok() && go_on() {
        let r = next(&mut x);
        let k = (r >> 8) as usize % LIVE;
        result = match r % 4 {
            _ if mine.len() < LIVE => {
                seeds += 1;
                let t = rt.tensor_from(DType::U8, &[len_of(seeds)], &pattern(seeds), "stress");
                t.map(|t| mine.push((t, seeds))).map_err(err("tensor"))
            }
            0 => {
                let (t, _) = mine.swap_remove(k);
                rt.free(t).map_err(err("free"))
            }
            1 => {
                let (t, seed) = &mut mine[k];
                seeds += 1;
                while len_of(seeds) != t.len() {
                    seeds += 1;
                }
                pin(t, true)
                    .and_then(|()| rt.upload(t, &pattern(seeds)).map_err(err("upload")))
                    .and_then(|_| pin(t, false))
                    .map(|()| *seed = seeds)
            }
            _ => check(&mine[k].0, mine[k].1),
        };
    }
    // Every byte of every live tensor, then free.
    for (t, seed) in mine {
        result = result.and(check(&t, seed));
        result = result.and(rt.free(t).map_err(err("free")));
    }
    result
}
