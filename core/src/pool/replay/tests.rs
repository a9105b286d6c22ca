//! Tests of record and replay over a host-backed arena pool.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::BlockRange;
use crate::host::{HostBackend, HostConfig};
use crate::pool::Allocation;
use crate::pool::{ArenaConfig, ArenaPool, Budget, ExpandableDesc};

fn replay_pool() -> ReplayPool {
    ReplayPool::new(dynamic_pool(), config())
}

/// A dynamic pool whose budget the replay arena joins.
fn dynamic_pool() -> Arc<ArenaPool> {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = ArenaConfig::device();
    Arc::new(ArenaPool::with_budget(backend, config, Budget::new(None)).unwrap())
}

fn config() -> ReplayConfig {
    ReplayConfig {
        plan_time_limit: Duration::from_millis(50),
        repeats: 2,
        ..ReplayConfig::default()
    }
}

/// One transformer-like step of 4 layers.
fn step(p: &ReplayPool, seq: u64) -> Vec<BlockRange> {
    step_layers(p, seq, 4)
}

/// One transformer-like step: a residual stream plus short-lived temporaries per layer, the
/// attention scores growing with the square of `seq`.
fn step_layers(p: &ReplayPool, seq: u64, layers: usize) -> Vec<BlockRange> {
    layer_step(p, seq, layers, 12 * seq * seq * 4)
}

/// [`step`] with flash attention: every tensor grows linearly with `seq`.
fn flash_step(p: &ReplayPool, seq: u64) -> Vec<BlockRange> {
    layer_step(p, seq, 4, 12 * seq * 256)
}

/// The layers of [`step_layers`], with attention scores of `scores` bytes.
fn layer_step(p: &ReplayPool, seq: u64, layers: usize, scores: u64) -> Vec<BlockRange> {
    p.begin_step_keyed(layers as u64).unwrap();
    let mut seen = Vec::new();
    let hidden = seq * 1536;
    let mut x = p.allocate(hidden, 256, "x").unwrap();
    seen.push(x.range);
    for _layer in 0..layers {
        let qkv = p.allocate(3 * hidden, 256, "qkv").unwrap();
        let scores = p.allocate(scores, 256, "scores").unwrap();
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

/// A buffer that grows between and inside steps (a KV cache segment) comes from the dynamic pool
/// and stays out of the recordings: the steps are planned and replayed as without it.
#[test]
fn an_expandable_allocation_grows_beside_the_steps_without_changing_their_plan() {
    let p = replay_pool();
    let e = DevicePool::expandable(&p).expect("the host arena below grows in place");
    let kv = e
        .allocate_expandable(&ExpandableDesc::new(4096, 64 << 20, "kv"))
        .unwrap()
        .unwrap();
    step(&p, 16);
    e.expand(kv.handle, 1 << 20).unwrap();
    step(&p, 16);
    p.begin_step_keyed(4).unwrap();
    let grown = e.expand(kv.handle, 8 << 20).unwrap();
    p.end_step().unwrap();
    assert_eq!(
        (grown.handle, grown.range.offset),
        (kv.handle, kv.range.offset)
    );
    assert_eq!(p.resolve(kv.handle).unwrap(), grown.range);
    step(&p, 16);
    step(&p, 16);
    let s = p.replay_stats();
    assert_eq!((s.plans, s.planned, s.divergences), (1, 2 * 21, 0), "{s:?}");
    p.free(kv.handle).unwrap();
    p.check_invariants().unwrap();
}

/// A larger run of the same shape (a longer sequence) whose attention scores grow faster than its
/// first allocation leaves the stretched plan at the scores (x and qkv came from it), runs
/// dynamically from there without error, and widens the plan; smaller runs then follow the
/// widened plan.
#[test]
fn a_larger_run_falls_back_then_widens_the_plan() {
    let p = replay_pool();
    step(&p, 16);
    step(&p, 16);
    step(&p, 24);
    let s = p.replay_stats();
    assert_eq!((s.divergences, s.plans, s.shapes), (1, 2, 1), "{s:?}");
    assert_eq!((s.stretched, s.planned), (1, 2), "{s:?}");
    let planned = s.planned;
    step(&p, 24);
    step(&p, 16);
    step(&p, 20);
    let s = p.replay_stats();
    assert_eq!(s.planned, planned + 3 * 21, "{s:?}");
    assert_eq!((s.divergences, s.plans), (1, 2));
    p.check_invariants().unwrap();
}

/// Scores that grow with the square of the sequence: the first longer step leaves the plan
/// stretched in proportion, and the shape learns each tensor's growth from it; the next longer
/// step follows the plan stretched by that growth from start to end, on the arena alone.
#[test]
fn a_longer_run_follows_the_growth_its_shape_learned() {
    let p = replay_pool();
    step(&p, 16);
    step(&p, 16);
    step(&p, 24);
    let s = p.replay_stats();
    assert_eq!((s.stretched, s.divergences), (1, 1), "{s:?}");
    let planned = s.planned;
    step(&p, 40);
    let s = p.replay_stats();
    assert_eq!((s.stretched, s.divergences), (2, 1), "{s:?}");
    assert_eq!(
        s.planned,
        planned + 21,
        "every allocation from the stretched plan"
    );
    assert_eq!(
        p.stats().reserved,
        s.arena_size,
        "only the arena is reserved"
    );
    for seq in [40, 32, 16] {
        step(&p, seq);
    }
    let after = p.replay_stats();
    assert_eq!(after.planned, planned + 4 * 21, "{after:?}");
    assert_eq!((after.divergences, after.arena_size), (1, s.arena_size));
    p.check_invariants().unwrap();
}

/// A longer sequence than any planned, whose tensors all grow with it, runs from its first
/// allocation on the plan stretched to it, on an arena reserved after the old one and the
/// dynamic pool's blocks went back; the stretched plan becomes the shape's, and the same and
/// shorter lengths follow it without compiling.
#[test]
fn a_longer_sequence_runs_from_a_stretched_plan() {
    let p = replay_pool();
    flash_step(&p, 64);
    flash_step(&p, 64);
    let s = p.replay_stats();
    assert_eq!((s.plans, s.stretched, s.planned), (1, 0, 0), "{s:?}");
    let arena = s.arena_size;
    flash_step(&p, 96);
    let s = p.replay_stats();
    assert_eq!((s.stretched, s.divergences, s.plans), (1, 0, 1), "{s:?}");
    assert_eq!(s.planned, 21, "every allocation from the stretched plan");
    assert_eq!(
        s.arena_size,
        (arena * 96).div_ceil(64).next_multiple_of(256)
    );
    assert_eq!(
        p.stats().reserved,
        s.arena_size,
        "only the arena is reserved"
    );
    for seq in [96, 80, 64] {
        flash_step(&p, seq);
    }
    let after = p.replay_stats();
    assert_eq!(
        (
            after.planned,
            after.plans,
            after.stretched,
            after.divergences
        ),
        (4 * 21, 1, 1, 0),
        "{after:?}"
    );
    assert_eq!(after.arena_size, s.arena_size);
    p.check_invariants().unwrap();
}

/// A step whose first allocation is larger than the plan's but which is another model (same key)
/// takes the stretched plan, leaves it at its second allocation, and runs on; at its end the
/// stretched arena goes back to what the plans need.
#[test]
fn a_wrong_stretch_costs_its_step_only() {
    let p = replay_pool();
    flash_step(&p, 64);
    flash_step(&p, 64);
    let arena = p.replay_stats().arena_size;
    p.begin_step_keyed(4).unwrap();
    let big = p.allocate(640 * 1536, 256, "x").unwrap();
    let s = p.replay_stats();
    assert_eq!(s.stretched, 1, "{s:?}");
    assert!(s.arena_size > 5 * arena, "{s:?}");
    let other = p.allocate(7, 8, "another model's tensor").unwrap();
    p.free(other.handle).unwrap();
    p.free(big.handle).unwrap();
    p.end_step().unwrap();
    let s = p.replay_stats();
    assert_eq!((s.divergences, s.arena_size), (1, arena), "{s:?}");
    assert_eq!(flash_step(&p, 64).len(), 21);
    assert_eq!(p.replay_stats().planned, 1 + 21);
    p.check_invariants().unwrap();
}

/// The plan is the only reservation in steady state: the recorded steps' blocks went back before
/// the arena was reserved, and the arena is exactly the plan.
#[test]
fn steady_state_reserves_exactly_the_plan() {
    let p = replay_pool();
    step(&p, 32);
    step(&p, 32);
    let s = p.replay_stats();
    assert!(s.arena_size > 0 && s.arena_size == s.arena_needed, "{s:?}");
    assert_eq!(
        p.pool().stats().reserved,
        0,
        "dynamic blocks kept beside the arena"
    );
    for _ in 0..3 {
        step(&p, 32);
    }
    let stats = p.stats();
    assert_eq!(stats.reserved, s.arena_size);
    assert_eq!(stats.blocks, 1);
    assert!(s.arena_size >= s.lower_bound);
    p.check_invariants().unwrap();
}

/// Two shapes (models of different depth, told apart by their step keys) alternate: each keeps
/// its plan, the arena fits the larger, and past `max_shapes` the least recently used plan goes.
#[test]
fn shapes_keep_their_plans_and_share_one_arena() {
    let p = replay_pool();
    for _ in 0..2 {
        step_layers(&p, 16, 2);
        step_layers(&p, 16, 6);
    }
    let s = p.replay_stats();
    assert_eq!(s.shapes, 2, "{s:?}");
    let planned = s.planned;
    step_layers(&p, 16, 2);
    step_layers(&p, 16, 6);
    let s = p.replay_stats();
    assert_eq!(s.planned, planned + (1 + 2 * 5) + (1 + 6 * 5), "{s:?}");

    let p = ReplayPool::new(
        dynamic_pool(),
        ReplayConfig {
            max_shapes: 2,
            repeats: 1,
            ..config()
        },
    );
    for layers in [1, 2, 3, 1, 2, 3] {
        step_layers(&p, 16, layers);
    }
    let s = p.replay_stats();
    assert_eq!((s.shapes, s.plans), (2, 6), "{s:?}");
    p.check_invariants().unwrap();
}

/// Under pressure (a trim) an idle arena goes back; the next step runs dynamically and the arena
/// returns at its end.
#[test]
fn trim_returns_an_idle_arena() {
    let p = replay_pool();
    step(&p, 16);
    step(&p, 16);
    let arena = p.replay_stats().arena_size;
    assert!(p.trim().unwrap() >= arena);
    assert_eq!(p.stats().reserved, 0);
    let planned = p.replay_stats().planned;
    step(&p, 16);
    let s = p.replay_stats();
    assert_eq!((s.planned, s.arena_size), (planned, arena), "{s:?}");
    step(&p, 16);
    assert_eq!(p.replay_stats().planned, planned + 21);
    // Inside a step the arena stays.
    p.begin_step().unwrap();
    p.trim().unwrap();
    assert_eq!(p.replay_stats().arena_size, arena);
    p.end_step().unwrap();
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
    let (rt, replay) =
        Runtime::with_replay_pool(backend, RuntimeConfig::default(), config()).unwrap();
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
