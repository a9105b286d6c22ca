use std::sync::{Arc, OnceLock};

use super::*;
use crate::pool::{ArenaConfig, ArenaPool};
use crate::{DType, HostBackend, HostConfig, Runtime, RuntimeConfig, Tensor};

const LEN: usize = 16 << 10; // 64 KiB of u32

/// A runtime whose device pool is a spilling pool over an arena of `capacity` bytes.
fn runtime(force_staging: bool, capacity: u64) -> (Runtime, Arc<SpillPool>) {
    runtime_with(force_staging, capacity, 64 << 10, SpillConfig::default())
}

/// [`runtime`] with the arena's blocks of `block_size` bytes and the spilling pool's `config`.
pub(super) fn runtime_with(
    force_staging: bool,
    capacity: u64,
    block_size: u64,
    config: SpillConfig,
) -> (Runtime, Arc<SpillPool>) {
    let host = Arc::new(
        HostBackend::new(HostConfig {
            force_staging,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let spill: Arc<OnceLock<Arc<SpillPool>>> = Arc::new(OnceLock::new());
    let keep = spill.clone();
    let rt = Runtime::with_pool(host, RuntimeConfig::default(), move |b, _budget| {
        let arena = ArenaPool::new(
            b.clone(),
            ArenaConfig {
                block_size,
                budget: Some(capacity),
                in_place: false,
                ..ArenaConfig::device()
            },
        )?;
        let pool = Arc::new(SpillPool::new(Arc::new(arena), b, config));
        let _ = keep.set(pool.clone());
        Ok(pool)
    })
    .unwrap();
    let pool = spill.get().unwrap().clone();
    (rt, pool)
}

fn pattern(seed: u32) -> Vec<u32> {
    (0..LEN as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
        .collect()
}

#[test]
fn four_times_the_capacity_fits_and_every_byte_comes_back() {
    for force_staging in [false, true] {
        let (rt, pool) = runtime(force_staging, 4 << 16);
        let tensors: Vec<Tensor> = (0..16)
            .map(|k| {
                rt.tensor_from(DType::U32, &[LEN], &pattern(k), "t")
                    .unwrap()
            })
            .collect();
        pool.pin(tensors[0].allocation().handle).unwrap();
        for round in 0..2 {
            for (k, t) in tensors.iter().enumerate() {
                assert_eq!(
                    rt.download::<u32>(t).unwrap(),
                    pattern(k as u32),
                    "tensor {k}, round {round}, staging {force_staging}"
                );
                assert!(
                    pool.is_resident(tensors[0].allocation().handle).unwrap(),
                    "pinned"
                );
                pool.check_invariants().unwrap();
            }
        }
        let s = pool.spill_stats();
        assert!(s.spills >= 12 && s.restores >= 12, "{s:?}");
        assert_eq!(s.bytes_out, s.spills * (64 << 10));
        assert!(rt.device_pool().stats().peak_reserved <= 4 << 16);
        for t in tensors {
            rt.free(t).unwrap();
        }
        assert_eq!(pool.spill_stats().spilled_now, 0);
        rt.check_leaks().unwrap();
    }
}

#[test]
fn everything_pinned_is_out_of_memory_and_loses_nothing() {
    let (rt, pool) = runtime(true, 2 << 16);
    let a = rt
        .tensor_from(DType::U32, &[LEN], &pattern(1), "a")
        .unwrap();
    let b = rt
        .tensor_from(DType::U32, &[LEN], &pattern(2), "b")
        .unwrap();
    pool.pin(a.allocation().handle).unwrap();
    pool.pin(b.allocation().handle).unwrap();
    let err = rt.alloc(DType::U32, &[LEN], "c").err().unwrap();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
    pool.unpin(b.allocation().handle).unwrap();
    let c = rt
        .tensor_from(DType::U32, &[LEN], &pattern(3), "c")
        .unwrap();
    assert!(!pool.is_resident(b.allocation().handle).unwrap());
    for (t, k) in [(&a, 1), (&b, 2), (&c, 3)] {
        assert_eq!(rt.download::<u32>(t).unwrap(), pattern(k));
    }
    let stale = c.allocation().handle;
    rt.free(c).unwrap();
    assert!(matches!(pool.pin(stale), Err(Error::StaleHandle { .. })));
    assert!(matches!(pool.unpin(stale), Err(Error::StaleHandle { .. })));
}

#[test]
fn eight_threads_under_pressure_lose_no_data() {
    let (rt, pool) = runtime(true, 8 << 16);
    std::thread::scope(|s| {
        for thread in 0..8u32 {
            let rt = rt.clone();
            s.spawn(move || {
                let mine: Vec<(Tensor, u32)> = (0..6)
                    .map(|k| {
                        let seed = thread * 100 + k;
                        (
                            rt.tensor_from(DType::U32, &[LEN], &pattern(seed), "t")
                                .unwrap(),
                            seed,
                        )
                    })
                    .collect();
                for (t, seed) in mine.iter().rev().chain(mine.iter()) {
                    assert_eq!(rt.download::<u32>(t).unwrap(), pattern(*seed));
                }
                for (t, _) in mine {
                    rt.free(t).unwrap();
                }
            });
        }
    });
    assert!(pool.spill_stats().spills > 0);
    pool.check_invariants().unwrap();
    rt.check_leaks().unwrap();
}

#[test]
fn a_traced_spill_pool_records_each_spill_and_restore_under_its_own_handles() {
    use crate::trace::{AnalyzeOptions, EventKind, FindingKind, Tracer, TransferKind, analyze};
    let (rt, pool) = runtime(false, 2 << 16);
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    let tensors: Vec<Tensor> = (0..4)
        .map(|k| {
            rt.tensor_from(DType::U32, &[LEN], &pattern(k), "t")
                .unwrap()
        })
        .collect();
    for (k, t) in tensors.iter().enumerate() {
        assert_eq!(rt.download::<u32>(t).unwrap(), pattern(k as u32));
    }
    let before = pool.spill_stats();
    assert!(before.spilled_now > 0, "{before:?}");
    for t in tensors {
        rt.free(t).unwrap();
    }
    rt.synchronize().unwrap();
    let trace = tracer.take();
    let stats = pool.spill_stats();
    assert_eq!(
        stats.restores, before.restores,
        "a spilled tensor is freed where it is, not brought back first"
    );
    assert!(stats.spills > 0 && stats.restores > 0, "{stats:?}");
    let count = |kind: TransferKind| {
        trace
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Transfer { kind: k, .. } if k == kind))
            .count() as u64
    };
    assert_eq!(
        (count(TransferKind::Spill), count(TransferKind::Restore)),
        (stats.spills, stats.restores)
    );
    // Every allocation is freed and reclaimed once, under its own id: the inner pool's reclaims
    // (in its own handles) no longer close another allocation's trace.
    let lifetimes = trace.lifetimes();
    assert_eq!(lifetimes.len(), 4);
    for l in &lifetimes {
        let reclaims = trace
            .events
            .iter()
            .filter(|e| e.kind == EventKind::FreeReclaimed { id: l.id })
            .count();
        assert!(l.free_step.is_some() && reclaims == 1, "{l:?}");
    }
    assert!(lifetimes.iter().any(|l| !l.away.is_empty()));
    let findings = analyze(&trace, &AnalyzeOptions::default());
    assert!(
        !findings.iter().any(|f| f.kind == FindingKind::Leak),
        "{findings:#?}"
    );
}
