//! Random sequences of pool and transfer operations with a failure injected at every backend call
//! (issue 12, item 7): 10^6 operations across seeds on the host backend, each seed with another
//! stack (guard margins, zero-on-reuse, forced staging, a device-memory cap). After every operation
//! the pool's invariants hold; after every failed one the live set and the bytes in use are what
//! they were (a failed free keeps the allocation live, a failed allocate holds nothing), the
//! reserved bytes did not grow (or grew by an idle block the backend refused to take back, which
//! the next trim returns), and every allocation whose bytes are known still reads back
//! exactly. At the end of each seed everything frees, trims and drops to zero blocks.
//!
//! `TENSORMEM_FAULT_OPS` overrides the total number of operations (default 10^6).

use std::sync::Arc;

use tensormem::ops::samples::Rng;
use tensormem::{
    Allocation, Backend, DevicePool, Error, HostBackend, HostConfig, PoolConfig, Runtime,
    RuntimeConfig, StagingConfig,
};
use tensormem_conformance::in_parallel;
use tensormem_conformance::inject::Faulty;

struct Live {
    alloc: Allocation,
    /// The bytes the allocation holds, when known (unknown after a failed write).
    bytes: Option<Vec<u8>>,
}

struct Seed {
    host: Arc<HostBackend>,
    faulty: Arc<Faulty>,
    rt: Runtime,
    pool: Arc<dyn DevicePool>,
    align: u64,
    live: Vec<Live>,
    rng: Rng,
}

const SEEDS: u64 = 40;

fn setup(seed: u64) -> Result<Seed, String> {
    let host = Arc::new(
        HostBackend::new(HostConfig {
            force_staging: seed % 4 == 1,
            // Some seeds run against a full device: the pressure path and real OOMs.
            device_memory: (seed % 5 == 2).then_some(3 << 20),
            ..HostConfig::default()
        })
        .map_err(|e| e.to_string())?,
    );
    let faulty = Arc::new(Faulty::new(host.clone()));
    let rt = Runtime::new(
        faulty.clone(),
        RuntimeConfig {
            device: PoolConfig {
                block_size: 1 << 20,
                zero_on_reuse: seed % 3 == 1,
                guard_bytes: if seed % 3 == 2 { 32 } else { 0 },
                ..PoolConfig::device()
            },
            staging: StagingConfig {
                block_size: 64 << 10,
                max_blocks: 3,
                ..StagingConfig::default()
            },
            force_staging: seed % 4 == 3,
            ..RuntimeConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let pool = rt.device_pool();
    let align = faulty.capabilities().copy_align.max(1);
    Ok(Seed {
        host,
        faulty,
        rt,
        pool,
        align,
        live: Vec::new(),
        rng: Rng::new(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)),
    })
}

fn fill(rng: &mut Rng, len: usize) -> Vec<u8> {
    let x = rng.next_u64();
    (0..len)
        .map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8)
        .collect()
}

/// One random operation. `Ok(true)` when it succeeded.
fn step(s: &mut Seed) -> Result<bool, String> {
    let op = s.rng.below(100);
    let n = s.live.len() as u64;
    let pick = if n > 0 { s.rng.below(n) as usize } else { 0 };
    let r: tensormem::Result<()> = match op {
        _ if n == 0 || (op < 35 && n < 48) => {
            let size = match s.rng.below(10) {
                0 => (64 << 10) + s.rng.below(700 << 10),
                _ => 1 + s.rng.below(6000),
            };
            let align = 1 << s.rng.below(13);
            s.pool.allocate(size, align, "random").map(|alloc| {
                s.live.push(Live { alloc, bytes: None });
            })
        }
        0..=44 => {
            let handle = s.live[pick].alloc.handle;
            let r = if s.rng.below(2) == 0 {
                s.pool.free(handle)
            } else {
                s.faulty.flush().and_then(|t| s.pool.free_after(handle, t))
            };
            if r.is_ok() {
                s.live.swap_remove(pick);
            }
            r
        }
        45..=69 => {
            let l = &mut s.live[pick];
            let size = l.alloc.range.size;
            let words = size / s.align;
            let offset = s.rng.below(words.max(1)) * s.align;
            let len = 1 + s.rng.below(size - offset) as usize;
            let data = fill(&mut s.rng, len);
            match s.rt.write_bytes(l.alloc, offset, &data) {
                Ok(_) => {
                    if let Some(b) = &mut l.bytes {
                        b[offset as usize..offset as usize + len].copy_from_slice(&data);
                    } else if offset == 0 && len as u64 == size {
                        l.bytes = Some(data);
                    }
                    Ok(())
                }
                Err(e) => {
                    l.bytes = None;
                    Err(e)
                }
            }
        }
        70..=84 => {
            let l = &s.live[pick];
            let mut out = vec![0u8; l.alloc.range.size as usize];
            s.rt.read_bytes(l.alloc, 0, &mut out)
                .and_then(|()| match &l.bytes {
                    Some(b) if *b != out => Err(Error::Corruption(format!(
                        "allocation {:?} reads back other bytes than written",
                        l.alloc.range
                    ))),
                    _ => Ok(()),
                })
        }
        85..=92 => {
            // Device work in flight on the allocation: its free must wait for it.
            let l = &mut s.live[pick];
            let r = s
                .faulty
                .fill_zero(l.alloc.range)
                .and_then(|t| s.pool.mark_used(l.alloc.handle, t));
            match &r {
                Ok(()) => l.bytes = Some(vec![0; l.alloc.range.size as usize]),
                Err(_) => l.bytes = None,
            }
            r
        }
        93..=95 => s.pool.trim().map(drop),
        96..=97 => s.pool.reclaim(),
        _ => s.rt.synchronize(),
    };
    match r {
        Ok(()) => Ok(true),
        Err(Error::Corruption(m)) => Err(m),
        Err(_) => Ok(false),
    }
}

/// Runs one seed; returns (operations that failed, failures injected).
fn run_seed(seed: u64, ops: u64) -> Result<(u64, u64), String> {
    let mut s = setup(seed)?;
    let mut failed = 0;
    for i in 0..ops {
        let before = s.pool.stats();
        let live_before = s.live.len();
        // A failure at one of the next few backend calls, most of the time.
        if s.rng.below(4) != 0 {
            s.faulty.fail_call(s.rng.below(6));
        }
        let ok = step(&mut s).map_err(|m| format!("seed {seed}, op {i}: {m}"))?;
        s.faulty.disarm();
        let after = s.pool.stats();
        s.pool
            .check_invariants()
            .map_err(|m| format!("seed {seed}, op {i}: invariant: {m}"))?;
        if !ok {
            failed += 1;
            let same = after.in_use == before.in_use
                && after.allocations == before.allocations
                && s.live.len() == live_before;
            // A block reserved for a failed allocate goes back at once, unless the backend
            // refuses that too (a second failure): then it stays, empty, for the next trim.
            let idle_only = after.reserved <= before.reserved
                || (s.pool.trim().is_ok() && s.pool.stats().reserved <= before.reserved);
            if !same || !idle_only {
                return Err(format!(
                    "seed {seed}, op {i}: a failed operation changed the pool: {before:?} -> {after:?}"
                ));
            }
        }
        if after.allocations != s.live.len() {
            return Err(format!(
                "seed {seed}, op {i}: pool holds {} allocations, the model {}",
                after.allocations,
                s.live.len()
            ));
        }
    }
    // Everything frees (failures disarmed), trims and drops to zero blocks: no leak.
    for l in s.live.drain(..) {
        s.pool
            .free(l.alloc.handle)
            .map_err(|e| format!("seed {seed}: final free: {e}"))?;
    }
    s.rt.synchronize()
        .map_err(|e| format!("seed {seed}: {e}"))?;
    s.pool.trim().map_err(|e| format!("seed {seed}: {e}"))?;
    s.rt.check_leaks()
        .map_err(|e| format!("seed {seed}: {e}"))?;
    let st = s.pool.stats();
    if (st.in_use, st.reserved, st.blocks) != (0, 0, 0) {
        return Err(format!("seed {seed}: after trim: {st:?}"));
    }
    let host = s.host.clone();
    let injected = s.faulty.injected();
    drop(s);
    if host.block_count() != 0 {
        return Err(format!(
            "seed {seed}: {} backend block(s) outlive the runtime",
            host.block_count()
        ));
    }
    Ok((failed, injected))
}

#[test]
fn random_sequences_with_a_failure_at_every_backend_call() {
    let total: u64 = std::env::var("TENSORMEM_FAULT_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let per_seed = total.div_ceil(SEEDS);
    // Seeds share nothing: they run on every core, each taking the next seed.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let outcomes = in_parallel(SEEDS as usize, cores, |seed| {
        run_seed(seed as u64, per_seed)
    });
    let (mut failed, mut injected) = (0, 0);
    for outcome in outcomes {
        match outcome {
            Ok((f, i)) => {
                failed += f;
                injected += i;
            }
            Err(m) => panic!("{m}"),
        }
    }
    eprintln!(
        "{} operations over {SEEDS} seeds: {injected} failures injected, {failed} operations \
         failed; zero invariant or leak violations",
        per_seed * SEEDS
    );
    assert!(
        failed > per_seed,
        "too few failures were exercised: {failed}"
    );
}

/// A free whose last use on the transfer lane cannot be joined (the join fails) reports the error
/// and frees the memory at the next synchronize: before, the tensor was consumed and its
/// allocation stayed live with no handle left to free it.
#[test]
fn a_free_whose_last_use_is_unknown_is_settled_by_the_next_synchronize() {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let faulty = Arc::new(Faulty::with_lanes(host));
    assert!(
        faulty.extensions().transfer_lanes.is_some(),
        "the host has a lane"
    );
    let rt = Runtime::new(faulty.clone(), RuntimeConfig::default()).unwrap();
    let src = rt
        .tensor_from(tensormem::DType::U32, &[1024], &[7u32; 1024], "src")
        .unwrap();
    let dst = rt.alloc(tensormem::DType::U32, &[1024], "dst").unwrap();
    let range = |t: &tensormem::Tensor| {
        let pool = rt.device_pool();
        let r = pool.resolve(t.allocation().handle).unwrap();
        pool.release(t.allocation().handle).unwrap();
        r
    };
    let lanes = tensormem::backend::lanes::of(rt.backend().as_ref());
    lanes.transfer_copy(range(&src), range(&dst)).unwrap();
    // The free's join of that copy onto the compute lane is the next backend call.
    faulty.fail_call(0);
    let freed = rt.free(dst);
    assert_eq!(faulty.injected(), 1);
    assert!(matches!(freed, Err(Error::Backend { .. })), "{freed:?}");
    assert!(
        rt.check_leaks().is_err(),
        "not freed before the work settles"
    );
    rt.synchronize().unwrap();
    rt.free(src).unwrap();
    rt.synchronize().unwrap();
    rt.check_leaks().unwrap();
}
