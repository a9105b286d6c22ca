//! Tests of record and replay over a host-backed arena pool.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::host::{HostBackend, HostConfig};
use crate::pool::{ArenaConfig, ArenaPool};

fn replay_pool() -> ReplayPool {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let pool = Arc::new(ArenaPool::new(backend, ArenaConfig::device()).unwrap());
    ReplayPool::new(pool, Duration::from_millis(50))
}

/// One transformer-like step: a residual stream plus short-lived temporaries per layer.
fn step(p: &ReplayPool, seq: u64) -> Vec<BlockRange> {
    p.begin_step().unwrap();
    let mut seen = Vec::new();
    let hidden = seq * 1536;
    let mut x = p.allocate(hidden, 256, "x").unwrap();
    seen.push(x.range);
    for _layer in 0..4 {
        let qkv = p.allocate(3 * hidden, 256, "qkv").unwrap();
        let scores = p.allocate(12 * seq * seq * 4, 256, "scores").unwrap();
        let ctx = p.allocate(hidden, 256, "ctx").unwrap();
        let live = [x, qkv, scores, ctx];
        assert_disjoint(&live);
        p.free(scores.handle).unwrap();
        p.free(qkv.handle).unwrap();
        let ffn = p.allocate(4 * hidden, 256, "ffn").unwrap();
        assert_disjoint(&[x, ctx, ffn]);
        let out = p.allocate(hidden, 256, "out").unwrap();
        assert_disjoint(&[x, ctx, ffn, out]);
        p.free(ffn.handle).unwrap();
        p.free(ctx.handle).unwrap();
        p.free(x.handle).unwrap();
        seen.extend([qkv.range, scores.range, ctx.range, ffn.range, out.range]);
        x = out;
    }
    p.free(x.handle).unwrap();
    p.end_step().unwrap();
    seen
}

fn assert_disjoint(live: &[Allocation]) {
    for (i, a) in live.iter().enumerate() {
        for b in &live[i + 1..] {
            let apart = a.range.block != b.range.block
                || a.range.offset + a.range.size <= b.range.offset
                || b.range.offset + b.range.size <= a.range.offset;
            assert!(apart, "{:?} overlaps {:?}", a.range, b.range);
        }
    }
}

#[test]
fn a_repeated_sequence_is_planned_then_replayed() {
    let p = replay_pool();
    step(&p, 16);
    step(&p, 16);
    let s = p.replay_stats();
    assert_eq!((s.plans, s.planned), (1, 0), "{s:?}");
    assert!(s.arena_size >= s.lower_bound && s.arena_size > 0);
    let before = p.pool().stats().blocks_allocated;
    let third = step(&p, 16);
    let fourth = step(&p, 16);
    let s = p.replay_stats();
    assert_eq!(s.planned, 2 * 21, "{s:?}");
    assert_eq!(s.divergences, 0);
    // Replay is deterministic and allocates no block.
    assert_eq!(third, fourth);
    assert_eq!(p.pool().stats().blocks_allocated, before);
}

#[test]
fn divergence_falls_back_then_replans() {
    let p = replay_pool();
    step(&p, 16);
    step(&p, 16);
    // A different shape: diverges at the first allocation, served dynamically, no error.
    step(&p, 24);
    let s = p.replay_stats();
    assert_eq!(s.divergences, 1, "{s:?}");
    assert_eq!(s.plans, 1);
    // The new shape repeats: re-planned, then replayed.
    step(&p, 24);
    assert_eq!(p.replay_stats().plans, 2);
    let planned = p.replay_stats().planned;
    step(&p, 24);
    assert_eq!(p.replay_stats().planned, planned + 21);
    p.pool().check_invariants().unwrap();
}

#[test]
fn handle_misuse_is_an_error() {
    let p = replay_pool();
    p.begin_step().unwrap();
    assert!(p.begin_step().is_err());
    let a = p.allocate(64, 1, "a").unwrap();
    p.free(a.handle).unwrap();
    assert!(matches!(p.free(a.handle), Err(Error::DoubleFree { .. })));
    let b = p.allocate(64, 1, "b").unwrap();
    // Planned or not, an allocation left live across end_step is refused only when planned; a
    // dynamic one may outlive its step and be freed later.
    p.end_step().unwrap();
    p.begin_step().unwrap();
    p.free(b.handle).unwrap();
    p.end_step().unwrap();
}

/// Outside a step the replay pool serves from its dynamic pool and records nothing, so a runtime
/// can use it as its device pool (issue 12, item 1).
#[test]
fn a_runtime_runs_on_a_replay_pool() {
    use crate::{DType, Runtime, RuntimeConfig};
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let mut made = None;
    let rt = Runtime::with_pool(backend, RuntimeConfig::default(), |front| {
        let arena = Arc::new(ArenaPool::new(front, ArenaConfig::device())?);
        let replay = Arc::new(ReplayPool::new(arena, Duration::from_millis(50)));
        made = Some(replay.clone());
        Ok(replay)
    })
    .unwrap();
    let replay = made.unwrap();
    let t = rt
        .tensor_from(DType::F32, &[3], &[1.0f32, 2.0, 3.0], "outside")
        .unwrap();
    assert_eq!(rt.download::<f32>(&t).unwrap(), vec![1.0, 2.0, 3.0]);
    rt.free(t).unwrap();
    // Two identical steps are planned; the third replays through the runtime's tensors.
    for _ in 0..3 {
        replay.begin_step().unwrap();
        let a = rt
            .tensor_from(DType::F32, &[2], &[4.0f32, 5.0], "a")
            .unwrap();
        let b = rt.alloc(DType::F32, &[64], "b").unwrap();
        assert_eq!(rt.download::<f32>(&a).unwrap(), vec![4.0, 5.0]);
        rt.free(b).unwrap();
        rt.free(a).unwrap();
        replay.end_step().unwrap();
    }
    let s = replay.replay_stats();
    assert_eq!((s.plans, s.planned), (1, 2), "{s:?}");
    assert_eq!(replay.replay_stats().dynamic, 1 + 4);
    replay.check_invariants().unwrap();
    rt.check_leaks().unwrap();
}
