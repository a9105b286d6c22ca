use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::ops::WeightFormat;
use crate::{DType, Graph, HostBackend, HostConfig, Op, RuntimeConfig, TensorId};

const LEN: usize = 64 << 10; // 256 KiB of f32 per tensor

/// Six layers `h = relu(h + w_k)`, the first layer's output added back at the end (a long
/// absence), `y` the output.
pub(super) fn graph() -> (Graph, TensorId, Vec<TensorId>, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[LEN]);
    let add = Op::Add {
        len: LEN as u32,
        b_len: LEN as u32,
    };
    let mut weights = Vec::new();
    let mut h = x;
    let mut skip = None;
    for k in 0..6 {
        let w = g.weight(&format!("w{k}"), DType::F32, &[LEN]);
        weights.push(w);
        let s = g
            .op(add.clone(), &[h, w], &[LEN], &format!("add{k}"))
            .unwrap();
        h = g
            .op(
                Op::Relu { len: LEN as u32 },
                &[s],
                &[LEN],
                &format!("relu{k}"),
            )
            .unwrap();
        skip.get_or_insert(h);
    }
    let y = g.op(add, &[h, skip.unwrap()], &[LEN], "residual").unwrap();
    g.output(y);
    (g, x, weights, y)
}

pub(super) fn runtime(force_staging: bool, budget: Option<u64>) -> Runtime {
    runtime_on(HostConfig::default(), force_staging, budget)
}

/// [`runtime`] on a host backend configured as given (slowed lanes, copy rules).
fn runtime_on(host: HostConfig, force_staging: bool, budget: Option<u64>) -> Runtime {
    let host = Arc::new(HostBackend::new(host).unwrap());
    let mut config = RuntimeConfig {
        force_staging,
        ..RuntimeConfig::default()
    };
    config.device.budget = budget;
    Runtime::new(host, config).unwrap()
}

/// The compile description of a model within `budget` device bytes, the rest default.
pub(super) fn within(budget: u64) -> CompileDesc {
    CompileDesc {
        device_budget: Some(budget),
        ..CompileDesc::default()
    }
}

/// Sets the weights and the input, runs twice, returns the output's bits.
pub(super) fn run(model: &mut Model, x: TensorId, weights: &[TensorId], y: TensorId) -> Vec<u32> {
    let weights = filled(weights, LEN, |k, i| ((i * 7 + k * 13) % 17) as f32 - 8.0);
    let input = (0..LEN).map(|i| (i % 11) as f32 * 0.25 - 1.0).collect();
    run_twice(model, &weights, &[(x, input)], y)
}

/// Each of `weights` with `len` values, `value(k, i)` the `i`th of the `k`th weight's.
pub(super) fn filled(
    weights: &[TensorId],
    len: usize,
    value: impl Fn(usize, usize) -> f32,
) -> Vec<(TensorId, Vec<f32>)> {
    weights
        .iter()
        .enumerate()
        .map(|(k, &w)| (w, (0..len).map(|i| value(k, i)).collect()))
        .collect()
}

/// Sets `weights` and `inputs`, runs twice (the second run must change nothing), returns the
/// output's bits.
pub(super) fn run_twice(
    model: &mut Model,
    weights: &[(TensorId, Vec<f32>)],
    inputs: &[(TensorId, Vec<f32>)],
    y: TensorId,
) -> Vec<u32> {
    for (w, data) in weights {
        model.set_weight(*w, bytemuck::cast_slice(data)).unwrap();
    }
    for (x, data) in inputs {
        model.set_input(*x, bytemuck::cast_slice(data)).unwrap();
    }
    model.run().unwrap();
    let first: Vec<f32> = model.read_output(y).unwrap();
    model.run().unwrap();
    let second: Vec<f32> = model.read_output(y).unwrap();
    assert_eq!(first, second, "a second run changes nothing");
    first.iter().map(|v| v.to_bits()).collect()
}

pub(super) fn unbudgeted() -> (Vec<u32>, u64) {
    let (g, x, w, y) = graph();
    let rt = runtime(false, None);
    let mut m = rt.compile(&g).unwrap();
    let out = run(&mut m, x, &w, y);
    let r = m.memory_report();
    (
        out,
        r.weight_bytes + r.io_bytes + r.activation_planned_bytes,
    )
}

#[test]
fn half_and_forty_percent_budget_runs_equal_the_unbudgeted_run_and_stays_within_it() {
    let (expected, need) = unbudgeted();
    for (force_staging, budget) in [
        (true, need / 2),
        (true, need * 2 / 5),
        (false, need / 2),
        (false, need * 2 / 5),
    ] {
        let (g, x, w, y) = graph();
        let rt = runtime(force_staging, Some(budget));
        let mut m = rt.compile_with(&g, &within(budget)).unwrap();
        assert_eq!(
            run(&mut m, x, &w, y),
            expected,
            "force_staging {force_staging}"
        );
        let r = m.memory_report();
        let o = r.offload.clone().unwrap();
        assert!(
            r.peak_device_bytes <= budget,
            "{} > {budget}",
            r.peak_device_bytes
        );
        assert!(o.planned_peak <= budget);
        assert_eq!(o.unified, !force_staging);
        if force_staging {
            assert!(o.bytes_to_device > 0, "{o:?}");
            // At 40% the skip connection must leave too: an activation goes out and back.
            assert_eq!(o.bytes_to_host > 0, budget < need / 2, "{o:?}");
        } else {
            assert_eq!(
                (o.bytes_to_device, o.bytes_to_host),
                (0, 0),
                "unified: nothing moves"
            );
        }
        drop(m);
        rt.check_leaks().unwrap();
    }
}

#[test]
fn a_budget_below_an_ops_operands_is_a_typed_error_naming_it() {
    let (g, ..) = graph();
    let rt = runtime(true, None);
    let err = rt.compile_with(&g, &within(600 << 10)).err().unwrap();
    match err {
        Error::BudgetBelowWorkingSet { op, needed, .. } => {
            assert_eq!(op, "add0");
            assert_eq!(needed, 3 * (256 << 10), "x, w0 and the sum");
        }
        e => panic!("{e}"),
    }
    assert_eq!(rt.device_pool().stats().allocations, 0, "nothing held");
}

const VOCAB: usize = 8192;
const DIM: usize = 32;
const ROWS: usize = 16;

/// A lookup of `ROWS` ids (one past the table) in a `[VOCAB, DIM]` table, then a relu.
fn lookup_graph(format: WeightFormat) -> (Graph, TensorId, Vec<TensorId>, TensorId) {
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[ROWS]);
    let mut weights = vec![g.weight("table", format.dtype(), &[VOCAB, DIM])];
    let (_, groups) = format.groups(DIM as u64);
    if format.has_scales() {
        weights.push(g.weight("scales", DType::F32, &[VOCAB, groups as usize]));
    }
    let mut inputs = weights.clone();
    inputs.push(ids);
    let op = Op::Embedding {
        vocab: VOCAB as u32,
        dim: DIM as u32,
        rows: ROWS as u32,
        weight_format: format,
    };
    let y = g.op(op, &inputs, &[ROWS, DIM], "lookup").unwrap();
    let relu = Op::Relu {
        len: (ROWS * DIM) as u32,
    };
    let z = g.op(relu, &[y], &[ROWS, DIM], "relu").unwrap();
    g.output(z);
    (g, ids, weights, z)
}

/// Sets the table (and scales) and the ids, runs twice, returns the output's bits.
fn run_lookup(model: &mut Model, ids: TensorId, weights: &[TensorId], z: TensorId) -> Vec<u32> {
    for (k, &w) in weights.iter().enumerate() {
        let size = model.graph().decl(w).unwrap().size().unwrap() as usize;
        let data: Vec<u8> = (0..size).map(|i| ((i * 31 + k * 7) % 251) as u8).collect();
        let data = if k == 1 {
            // Scales: small positive floats.
            (0..size / 4)
                .flat_map(|i| (0.01 + (i % 13) as f32 * 0.003).to_le_bytes())
                .collect()
        } else {
            data
        };
        model.set_weight(w, &data).unwrap();
    }
    let mut id_list: Vec<u32> = (0..ROWS as u32)
        .map(|i| (i * 977 + 5) % VOCAB as u32)
        .collect();
    id_list[3] = VOCAB as u32 + 3; // past the table: a row of zeros
    id_list[7] = id_list[2]; // a repeated id
    model
        .set_input(ids, bytemuck::cast_slice(&id_list))
        .unwrap();
    model.run().unwrap();
    let first: Vec<f32> = model.read_output(z).unwrap();
    model.run().unwrap();
    assert_eq!(first, model.read_output::<f32>(z).unwrap());
    assert_eq!(
        model.read_output::<u32>(ids).unwrap(),
        id_list,
        "ids read back"
    );
    first.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_budget_below_an_embedding_table_streams_only_the_rows_the_ids_select() {
    for format in [WeightFormat::F32, WeightFormat::Int8 { group: 16 }] {
        let (g, ids, w, z) = lookup_graph(format);
        let rt = runtime(true, None);
        let mut m = rt.compile(&g).unwrap();
        let expected = run_lookup(&mut m, ids, &w, z);
        assert!(expected.iter().any(|&b| b != 0), "a real lookup");
        let r = m.memory_report();
        let need = r.unbudgeted_device_bytes();
        drop(m);
        let table: u64 = w.iter().map(|&t| g.decl(t).unwrap().size().unwrap()).sum();
        let budget = 32 << 10;
        assert!(budget < table / 4, "{format:?}: the table cannot fit");
        let mut m = rt.compile_with(&g, &within(budget)).unwrap();
        assert_eq!(run_lookup(&mut m, ids, &w, z), expected, "{format:?}");
        let r = m.memory_report();
        let o = r.offload.clone().unwrap();
        assert!(r.peak_device_bytes <= budget, "{format:?}: {r:?}");
        let scales_row =
            format.groups(DIM as u64).1 as usize * 4 * usize::from(format.has_scales());
        let staged = ROWS * (DIM * format.dtype().size() as usize + scales_row + 4);
        assert_eq!(
            o.bytes_to_device,
            2 * staged as u64,
            "{format:?}: rows, not the table"
        );
        drop(m);
        // With room for the whole table it stays resident: nothing moves.
        let mut m = rt.compile_with(&g, &within(need)).unwrap();
        assert_eq!(run_lookup(&mut m, ids, &w, z), expected, "{format:?}");
        let o = m.memory_report().offload.unwrap();
        assert_eq!((o.bytes_to_device, o.bytes_to_host), (0, 0), "{format:?}");
        drop(m);
        rt.check_leaks().unwrap();
    }
}

/// Issue 16, item 4: a budgeted model's device bytes are in its runtime's account, so a second
/// model that would take the runtime past its limit is refused, and dropping the first gives its
/// bytes back.
#[test]
fn a_budgeted_model_counts_in_its_runtimes_account() {
    let (_, need) = unbudgeted();
    let budget = need / 2;
    let (g, x, w, y) = graph();
    let rt = runtime(true, Some(budget + budget / 2));
    let desc = within(budget);
    let before = rt.budget().reserved();
    let mut m = rt.compile_with(&g, &desc).unwrap();
    run(&mut m, x, &w, y);
    let r = m.memory_report();
    let planned = r.offload.as_ref().unwrap().planned_peak;
    assert!(r.runtime_reserved_bytes >= before + planned, "{r:?}");
    assert_eq!(r.runtime_limit, Some(budget + budget / 2));
    assert!(r.peak_device_bytes <= budget);
    match rt.compile_with(&g, &desc) {
        Err(Error::OutOfMemory(_)) => {}
        Err(e) => panic!("expected out of memory, got {e}"),
        Ok(_) => panic!("two half budgets fit in one and a half"),
    }
    drop(m);
    rt.synchronize().unwrap();
    assert!(
        rt.budget().reserved() < before + planned,
        "the arena went back"
    );
    let m = rt.compile_with(&g, &desc).unwrap();
    drop(m);
    rt.check_leaks().unwrap();
}

/// The copies on the host's concurrent transfer lane, with both workers slowed so that every
/// missing cross-lane order would show: the output equals the unbudgeted run's, with the lane
/// on and off, and the report says which ran.
#[test]
fn copies_on_a_slow_transfer_lane_keep_the_output_bit_identical() {
    let (expected, need) = unbudgeted();
    for transfer_lane in [true, false] {
        let (g, x, w, y) = graph();
        let budget = need * 2 / 5;
        let host = HostConfig {
            worker_delay: Duration::from_micros(300),
            ..HostConfig::default()
        };
        let rt = runtime_on(host, true, Some(budget));
        let mut m = rt
            .compile_with(
                &g,
                &CompileDesc {
                    device_budget: Some(budget),
                    transfer_lane,
                    ..CompileDesc::default()
                },
            )
            .unwrap();
        assert_eq!(run(&mut m, x, &w, y), expected, "lane {transfer_lane}");
        let o = m.memory_report().offload.unwrap();
        assert_eq!(o.transfer_lane, transfer_lane);
        assert_eq!(
            o.lane_waits_measured, transfer_lane,
            "the host times its compute lane's waits"
        );
        assert!(o.bytes_to_host > 0 && o.bytes_to_device > 0, "{o:?}");
        drop(m);
        rt.check_leaks().unwrap();
    }
}

/// Swap-ins as one device copy from the `Readback` slot (the backend copies out of host-visible
/// memory) and through the host (asked for, or a backend that copies in the staging directions
/// only, as WebGPU): the same bytes move, the output equals the unbudgeted run's on slowed
/// lanes, and the report says which path ran.
#[test]
fn swap_ins_copy_straight_from_host_visible_memory_where_the_backend_can() {
    let (expected, need) = unbudgeted();
    let mut moved = Vec::new();
    for host_visible_copies in [true, false] {
        for direct_swap_in in [true, false] {
            for transfer_lane in [true, false] {
                let (g, x, w, y) = graph();
                let budget = need * 2 / 5;
                let host = HostConfig {
                    worker_delay: Duration::from_micros(200),
                    host_visible_copies,
                    ..HostConfig::default()
                };
                let rt = runtime_on(host, true, Some(budget));
                let desc = CompileDesc {
                    device_budget: Some(budget),
                    transfer_lane,
                    direct_swap_in,
                    ..CompileDesc::default()
                };
                let mut m = rt.compile_with(&g, &desc).unwrap();
                let what = format!(
                    "host_visible_copies {host_visible_copies}, direct {direct_swap_in}, lane \
                     {transfer_lane}"
                );
                assert_eq!(run(&mut m, x, &w, y), expected, "{what}");
                let o = m.memory_report().offload.unwrap();
                assert_eq!(
                    o.direct_swap_in,
                    direct_swap_in && host_visible_copies,
                    "{what}"
                );
                assert!(
                    o.bytes_to_host > 0,
                    "{what}: an activation went out and back"
                );
                moved.push((o.bytes_to_device, o.bytes_to_host));
                drop(m);
                rt.check_leaks().unwrap();
            }
        }
    }
    assert!(moved.windows(2).all(|p| p[0] == p[1]), "{moved:?}");
}

/// The swap-in's order after its copy-out, alone: on slowed host lanes a copy-out queued behind
/// a prefetch, its swap-in into other arena bytes (no write joins the copy-out), a kernel reading
/// it. Without that order (the swap-in on the compute queue) the kernel reads the slot's old
/// zeros; the conformance case `swap_order` runs the same path on every backend.
#[test]
fn a_swap_in_on_slowed_lanes_follows_its_copy_out() {
    use crate::backend::{BlockDesc, BlockRange};
    use crate::{Backend, BlockId, MemoryKind};
    const N: u64 = 256;
    let bytes = N * 4;
    let b = HostBackend::new(HostConfig {
        worker_delay: Duration::from_millis(20),
        ..HostConfig::default()
    })
    .unwrap();
    let alloc = |kind, size| {
        b.alloc_block(&BlockDesc {
            kind,
            size,
            label: "swap order",
        })
        .unwrap()
    };
    let at = |block: BlockId, offset: u64| BlockRange {
        block,
        offset,
        size: bytes,
    };
    let arena = alloc(MemoryKind::DeviceLocal, 3 * bytes);
    let input = alloc(MemoryKind::Upload, bytes);
    let (slot, out_slot) = (
        alloc(MemoryKind::Readback, bytes),
        alloc(MemoryKind::Readback, bytes),
    );
    let (weight, weight_home) = (
        alloc(MemoryKind::Upload, bytes),
        alloc(MemoryKind::DeviceLocal, bytes),
    );
    let x: Vec<f32> = (0..N).map(|i| i as f32 - 100.5).collect();
    b.write_mapped(input, 0, bytemuck::cast_slice(&x)).unwrap();

    let mut lanes = lanes::RunLanes::new(&b, true, 2);
    let mut last = b.copy(at(input, 0), at(arena, 0)).unwrap();
    lanes
        .copy_in(&b, &mut last, 1, at(weight, 0), at(weight_home, 0))
        .unwrap();
    let out = lanes
        .copy_out(&b, &mut last, 0, at(arena, 0), at(slot, 0))
        .unwrap();
    lanes
        .swap_in(&b, &mut last, 0, at(slot, 0), at(arena, bytes), out)
        .unwrap();
    lanes
        .before_compute(&b, [0], &[(2 * bytes, bytes)])
        .unwrap();
    last = b
        .dispatch(
            &Op::Relu { len: N as u32 },
            &[at(arena, bytes), at(arena, 2 * bytes)],
        )
        .unwrap();
    lanes
        .copy_out(
            &b,
            &mut last,
            2 * bytes,
            at(arena, 2 * bytes),
            at(out_slot, 0),
        )
        .unwrap();
    let last = lanes.finish(&b).unwrap().unwrap_or(last);
    b.wait_timeout(last, None).unwrap();
    let mut got = vec![0f32; N as usize];
    b.read_mapped(out_slot, 0, bytemuck::cast_slice_mut(&mut got))
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(
        got, want,
        "the kernel read the slot before the copy-out wrote it"
    );
    // A copy-out never issued on this lane is not an order: refused, nothing enqueued.
    let mut after = last;
    let err = lanes.swap_in(
        &b,
        &mut after,
        0,
        at(slot, 0),
        at(arena, bytes),
        TransferTicket(99),
    );
    assert!(
        matches!(err, Err(Error::InvariantViolated { .. })),
        "{err:?}"
    );
    assert_eq!(after, last, "nothing enqueued");
}

/// A kernel that writes one part of a tensor (a view, as a tiled chain's parts do) while the
/// tensor's copy-in, bringing back its other part, is still on a slow transfer lane: the kernel
/// joins that copy, else the copy lands after it and overwrites the part with the old bytes.
/// `x` is written whole, leaves while two large ops run, comes back during a small one and has
/// its second half overwritten; the output reads it whole.
#[test]
fn a_kernel_writing_part_of_a_tensor_waits_for_its_copy_in() {
    let (half, big) = (LEN / 2, 4 * LEN);
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[LEN]);
    let b = g.input("b", DType::F32, &[big]);
    let relu = |len: usize| Op::Relu { len: len as u32 };
    let x = g.op(relu(LEN), &[a], &[LEN], "x").unwrap();
    // Unread results: they only take the room while `x` is away.
    g.op(relu(big), &[b], &[big], "big0").unwrap();
    g.op(relu(big), &[b], &[big], "big1").unwrap();
    g.op(relu(LEN), &[a], &[LEN], "small").unwrap();
    let a1 = g.view(a, (half * 4) as u64, &[half]).unwrap();
    let x1 = g.view(x, (half * 4) as u64, &[half]).unwrap();
    let scale = |len: usize, alpha: f32| Op::Scale {
        len: len as u32,
        alpha,
    };
    g.op_into(scale(half, 2.0), &[a1], x1, "x.second_half")
        .unwrap();
    let y = g.op(scale(LEN, 0.5), &[x], &[LEN], "y").unwrap();
    g.output(y);
    let run = |m: &mut Model| -> Vec<u32> {
        let av: Vec<f32> = (0..LEN).map(|i| (i % 13) as f32 - 6.0).collect();
        let bv: Vec<f32> = (0..big).map(|i| (i % 5) as f32 - 2.0).collect();
        m.set_input(a, bytemuck::cast_slice(&av)).unwrap();
        m.set_input(b, bytemuck::cast_slice(&bv)).unwrap();
        m.run().unwrap();
        let got: Vec<f32> = m.read_output(y).unwrap();
        got.iter().map(|v| v.to_bits()).collect()
    };
    let want = run(&mut runtime(false, None).compile(&g).unwrap());
    // Room for `a`, `b` and one large result, not for `x` beside them.
    let budget = ((2 * big + LEN + half) * 4) as u64;
    let host = HostConfig {
        transfer_delay: Duration::from_millis(30),
        ..HostConfig::default()
    };
    let rt = runtime_on(host, true, None);
    let desc = CompileDesc {
        device_budget: Some(budget),
        min_offload_size: 0,
        ..CompileDesc::default()
    };
    let mut m = rt.compile_with(&g, &desc).unwrap();
    let got = run(&mut m);
    let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
    assert_eq!(differ, 0, "{differ} of {LEN} outputs differ");
    let o = m.memory_report().offload.unwrap();
    assert!(
        o.bytes_to_host >= (LEN * 4) as u64,
        "x did not leave: {o:?}"
    );
}
