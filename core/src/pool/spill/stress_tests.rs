//! Threads against one spilling pool: every thread writes a pattern of its own into each of its
//! tensors, reads every byte back, rewrites, pins and frees them while the budget forces spills
//! and restores; any byte that differs is a bad read. Short runs here (host backend, mapped and
//! forced staging); ``examples/src/bin/spill_stress.rs`` runs the same workload for longer on every target.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::{DType, Runtime, Tensor};

const THREADS: u32 = 16;
/// Tensors each thread holds at most.
const LIVE: usize = 6;

/// A runtime whose spilling pool waits up to 10 s, over an arena of 16 KiB blocks.
fn runtime(force_staging: bool, capacity: u64) -> (Runtime, Arc<SpillPool>) {
    let config = SpillConfig {
        max_wait: Duration::from_secs(10),
    };
    super::tests::runtime_with(force_staging, capacity, 16 << 10, config)
}

fn pattern(seed: u64) -> Vec<u8> {
    (0..len_of(seed) as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)) as u8)
        .collect()
}

/// A tensor's length in bytes: 1 to 8 KiB, most not a whole number of copy words (a write of
/// such a length reads its last word first, a nested use of the allocation).
fn len_of(seed: u64) -> usize {
    let odd = (seed % 3) as usize;
    1024 * (1 + (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize) - odd
}

/// xorshift: a reproducible choice per thread.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// What one run saw.
#[derive(Debug, Default)]
struct Seen {
    reads: u64,
    bad_reads: u64,
    spills: u64,
}

/// `THREADS` threads for `time`, each holding up to `LIVE` tensors; `pins`: a pin/unpin pair
/// around every read and write.
fn run(force_staging: bool, pins: bool, time: Duration) -> Seen {
    // Twice what the threads pin at once (8 KiB each at most), about 60% of what is live.
    let (rt, pool) = runtime(force_staging, 256 << 10);
    let reads = AtomicU64::new(0);
    let bad = AtomicU64::new(0);
    let end = Instant::now() + time;
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (rt, pool, reads, bad) = (rt.clone(), pool.clone(), &reads, &bad);
            s.spawn(move || {
                let mut x = 0x2545_F491_4F6C_DD1D ^ ((u64::from(thread) + 1) * 0x1_0000_0001);
                let mut seeds = u64::from(thread) << 40;
                let mut mine: Vec<(Tensor, u64)> = Vec::new();
                let use_pin = |t: &Tensor, on: bool| {
                    if pins {
                        let h = t.allocation().handle;
                        if on { pool.pin(h) } else { pool.unpin(h) }.unwrap();
                    }
                };
                let check = |t: &Tensor, seed: u64| {
                    use_pin(t, true);
                    let got = rt.download::<u8>(t).unwrap();
                    use_pin(t, false);
                    reads.fetch_add(1, Ordering::Relaxed);
                    if got != pattern(seed) {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                };
                while Instant::now() < end {
                    let r = next(&mut x);
                    let k = (r >> 8) as usize % LIVE.max(1);
                    match r % 4 {
                        _ if mine.len() < LIVE => {
                            seeds += 1;
                            let t =
                                rt.tensor_from(DType::U8, &[len_of(seeds)], &pattern(seeds), "s");
                            mine.push((t.unwrap(), seeds));
                        }
                        0 => {
                            let (t, _) = mine.swap_remove(k);
                            rt.free(t).unwrap();
                        }
                        1 => {
                            let (t, seed) = &mut mine[k];
                            seeds += 1;
                            while len_of(seeds) != t.len() {
                                seeds += 1;
                            }
                            use_pin(t, true);
                            rt.upload(t, &pattern(seeds)).unwrap();
                            use_pin(t, false);
                            *seed = seeds;
                        }
                        _ => check(&mine[k].0, mine[k].1),
                    }
                }
                // Every byte of every live tensor, then free.
                for (t, seed) in mine {
                    check(&t, seed);
                    rt.free(t).unwrap();
                }
            });
        }
    });
    pool.check_invariants().unwrap();
    rt.check_leaks().unwrap();
    Seen {
        reads: reads.into_inner(),
        bad_reads: bad.into_inner(),
        spills: pool.spill_stats().spills,
    }
}

#[test]
fn sixteen_threads_read_back_every_byte_they_wrote() {
    for force_staging in [false, true] {
        for pins in [false, true] {
            let seen = run(force_staging, pins, Duration::from_millis(600));
            assert!(seen.spills > 0 && seen.reads > 0, "{seen:?}");
            assert_eq!(
                seen.bad_reads, 0,
                "staging {force_staging}, pins {pins}: {seen:?}"
            );
        }
    }
}
