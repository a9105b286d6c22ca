//! Budgeted compilation (issue 16): a graph compiled within a device budget runs with outputs
//! bit-identical to the unbudgeted run of the same graph on the same target, its device pool never
//! reserves more than the budget, and a budget below one op's operands is a typed error naming
//! that op; an embedding table larger than the budget streams only the rows its ids select. Each
//! graph runs twice: on the target as it is (unified memory binds offloaded tensors
//! in place) and with staging forced (every offload copy runs, as on a discrete GPU). Swap-ins
//! take both paths where the backend offers the direct one: a device copy out of host-visible
//! memory, and a read back through the host. An activation whose producer can be re-run from
//! resident inputs is recomputed instead of swapped (issue 45), with the same outputs.

use tensormem::graph::TensorKind;
use tensormem::ops::{DType, Op, WeightFormat};
use tensormem::{CompileDesc, DevicePool, Error, Graph, Model, Runtime, TensorId};

use super::graphs::{RandomGraph, random_graph};
use super::{bytes, staged_runtime};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("budgeted_equals_unbudgeted", budgeted_equals_unbudgeted),
        case!("budget_below_working_set", budget_below_working_set),
        case!(
            "embedding_rows_below_the_table",
            embedding_rows_below_the_table
        ),
        case!("swap_in_paths", swap_in_paths),
        case!("recomputed_equals_unbudgeted", recomputed_equals_unbudgeted),
    ]
}

async fn feed(ctx: &Ctx, model: &mut Model, rg: &RandomGraph) -> R {
    for (t, data) in &rg.feeds {
        let b = bytes(data);
        match rg.graph.decl(*t).map_err(fail("decl"))?.kind {
            TensorKind::Weight => ctx.set_weight(model, *t, &b).await,
            _ => ctx.set_input(model, *t, &b).await,
        }
        .map_err(fail("feed"))?;
    }
    Ok(())
}

/// The outputs' bits after two runs (the second over the first's stale bytes).
async fn outputs(ctx: &Ctx, model: &mut Model, outs: &[TensorId]) -> Result<Vec<Vec<u32>>, String> {
    let mut v = Vec::new();
    for _ in 0..2 {
        ctx.run(model).await.map_err(fail("run"))?;
        v.clear();
        for &o in outs {
            let got: Vec<f32> = ctx.read_output(model, o).await.map_err(fail("read"))?;
            v.push(got.iter().map(|x| x.to_bits()).collect());
        }
    }
    Ok(v)
}

/// The unbudgeted run of `rg` on `rt`: its outputs' bits and the device bytes it needed.
async fn unbudgeted(
    ctx: &Ctx,
    rt: &Runtime,
    rg: &RandomGraph,
) -> Result<(Vec<Vec<u32>>, u64), String> {
    let mut plain = rt.compile(&rg.graph).map_err(fail("compile"))?;
    feed(ctx, &mut plain, rg).await?;
    let want = outputs(ctx, &mut plain, &rg.outputs).await?;
    Ok((want, plain.memory_report().unbudgeted_device_bytes()))
}

async fn budgeted_equals_unbudgeted(ctx: &Ctx) -> R {
    let mut moved = 0u64;
    for force_staging in [false, true] {
        let rt = staged_runtime(ctx, force_staging)?;
        for seed in 1..=12 {
            let rg = random_graph(seed)?;
            let (want, need) = unbudgeted(ctx, &rt, &rg).await?;
            // Half of the need, raised to what the tightest op needs when that is more.
            let (mut model, budget) =
                compile_within(&rt, &rg.graph, CompileDesc::default(), need / 2, need, seed)?;
            feed(ctx, &mut model, &rg).await?;
            let got = outputs(ctx, &mut model, &rg.outputs).await?;
            check(got == want, || {
                format!(
                    "graph {seed}, budget {budget} of {need}, staging forced {force_staging}: outputs differ"
                )
            })?;
            let r = model.memory_report();
            let o = r.offload.ok_or("a budgeted model reports its offload")?;
            check(r.peak_device_bytes <= budget, || {
                format!(
                    "graph {seed}: peak {} over budget {budget}",
                    r.peak_device_bytes
                )
            })?;
            let unified = ctx.backend.capabilities().device_host_visible && !force_staging;
            check(o.unified == unified, || {
                format!("graph {seed}: unified {}", o.unified)
            })?;
            if unified {
                check(o.bytes_to_device + o.bytes_to_host == 0, || {
                    format!("graph {seed}: unified memory moved {o:?}")
                })?;
            }
            moved += o.bytes_to_device;
        }
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    check(moved > 0, || "no budgeted graph moved a byte".into())
}

/// With staging forced, each random graph at 40% of its need (raised to its tightest op) is
/// compiled with direct swap-ins asked for and not: both outputs equal the unbudgeted run's, the
/// same bytes move, activations do go out and back in some graph, and the report says a swap-in
/// was a device copy exactly where the backend copies out of host-visible memory.
async fn swap_in_paths(ctx: &Ctx) -> R {
    let rt = staged_runtime(ctx, true)?;
    let both_ways = ctx.backend.capabilities().host_visible_copies;
    let mut swapped = 0u64;
    for seed in 1..=8 {
        let rg = random_graph(seed)?;
        let (want, need) = unbudgeted(ctx, &rt, &rg).await?;
        let mut moved = Vec::new();
        for direct_swap_in in [true, false] {
            let desc = CompileDesc {
                direct_swap_in,
                ..CompileDesc::default()
            };
            let (mut model, _) = compile_within(&rt, &rg.graph, desc, need * 2 / 5, need, seed)?;
            feed(ctx, &mut model, &rg).await?;
            let got = outputs(ctx, &mut model, &rg.outputs).await?;
            check(got == want, || {
                format!("graph {seed}, direct swap-ins {direct_swap_in}: outputs differ")
            })?;
            let o = model
                .memory_report()
                .offload
                .ok_or("a budgeted model reports its offload")?;
            check(o.direct_swap_in == (direct_swap_in && both_ways), || {
                format!(
                    "graph {seed}: asked {direct_swap_in}, backend both ways {both_ways}, \
                     report {}",
                    o.direct_swap_in
                )
            })?;
            moved.push((o.bytes_to_device, o.bytes_to_host));
            swapped += o.bytes_to_host;
        }
        check(moved[0] == moved[1], || {
            format!("graph {seed}: the two paths moved {moved:?}")
        })?;
    }
    rt.check_leaks().map_err(fail("leaks"))?;
    check(swapped > 0, || "no activation went out and back".into())
}

async fn budget_below_working_set(ctx: &Ctx) -> R {
    let rt = staged_runtime(ctx, true)?;
    let len = 64 << 10;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[len]);
    let w = g.weight("w", DType::F32, &[len]);
    let op = Op::Add {
        len: len as u32,
        b_len: len as u32,
    };
    let y = g
        .op(op, &[x, w], &[len], "the big add")
        .map_err(fail("graph"))?;
    let z = g
        .op(Op::Relu { len: len as u32 }, &[y], &[len], "relu")
        .map_err(fail("graph"))?;
    g.output(z);
    let desc = CompileDesc {
        device_budget: Some(512 << 10),
        ..CompileDesc::default()
    };
    match rt.compile_with(&g, &desc) {
        Err(Error::BudgetBelowWorkingSet {
            step,
            op,
            needed,
            budget,
        }) => {
            check(step == 0 && op == "the big add", || {
                format!("named op {step} '{op}'")
            })?;
            check(needed == 3 * 4 * len as u64, || format!("needed {needed}"))?;
            check(budget == 512 << 10, || format!("budget {budget}"))?;
        }
        Ok(_) => return Err("a budget below the op's operands compiled".into()),
        Err(e) => return Err(format!("wrong error: {e}")),
    }
    check(rt.device_pool().stats().allocations == 0, || {
        "the failed compile holds device memory".into()
    })
}

/// `(tensor, bytes)` of a graph's weights and inputs.
type Feeds = Vec<(TensorId, Vec<u8>)>;

async fn feed_bytes(ctx: &Ctx, model: &mut Model, g: &Graph, feeds: &Feeds) -> R {
    for (t, b) in feeds {
        match g.decl(*t).map_err(fail("decl"))?.kind {
            TensorKind::Weight => ctx.set_weight(model, *t, b).await,
            _ => ctx.set_input(model, *t, b).await,
        }
        .map_err(fail("feed"))?;
    }
    Ok(())
}

/// A lookup of 16 ids (one past the table, one repeated) in an 8192-row table, then a relu.
fn lookup_graph(format: WeightFormat) -> Result<(Graph, Feeds, TensorId), String> {
    const VOCAB: usize = 8192;
    const DIM: usize = 32;
    const ROWS: usize = 16;
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[ROWS]);
    let table = g.weight("table", format.dtype(), &[VOCAB, DIM]);
    let table_bytes = VOCAB * DIM * format.dtype().size() as usize;
    let mut feeds = vec![(
        table,
        (0..table_bytes)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<u8>>(),
    )];
    let mut inputs = vec![table];
    if format.has_scales() {
        let groups = format.groups(DIM as u64).1 as usize;
        let scales = g.weight("scales", DType::F32, &[VOCAB, groups]);
        let values: Vec<f32> = (0..VOCAB * groups)
            .map(|i| 0.01 + (i % 13) as f32 * 0.003)
            .collect();
        feeds.push((
            scales,
            values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
        inputs.push(scales);
    }
    inputs.push(ids);
    let mut id_list: Vec<u32> = (0..ROWS as u32)
        .map(|i| (i * 977 + 5) % VOCAB as u32)
        .collect();
    id_list[3] = VOCAB as u32 + 3;
    id_list[7] = id_list[2];
    feeds.push((ids, id_list.iter().flat_map(|i| i.to_le_bytes()).collect()));
    let op = Op::Embedding {
        vocab: VOCAB as u32,
        dim: DIM as u32,
        rows: ROWS as u32,
        weight_format: format,
    };
    let y = g
        .op(op, &inputs, &[ROWS, DIM], "lookup")
        .map_err(fail("graph"))?;
    let relu = Op::Relu {
        len: (ROWS * DIM) as u32,
    };
    let z = g
        .op(relu, &[y], &[ROWS, DIM], "relu")
        .map_err(fail("graph"))?;
    g.output(z);
    Ok((g, feeds, z))
}

/// Issue 16, item 2: a budget below an embedding table's size runs, on the discrete path by
/// uploading only the rows the ids select, with outputs bit-identical to the unbudgeted run.
async fn embedding_rows_below_the_table(ctx: &Ctx) -> R {
    for force_staging in [false, true] {
        let rt = staged_runtime(ctx, force_staging)?;
        for format in [WeightFormat::F32, WeightFormat::Int8 { group: 16 }] {
            let (g, feeds, z) = lookup_graph(format)?;
            let mut plain = rt.compile(&g).map_err(fail("compile"))?;
            feed_bytes(ctx, &mut plain, &g, &feeds).await?;
            let want = outputs(ctx, &mut plain, &[z]).await?;
            drop(plain);
            let budget = 48 << 10;
            let desc = CompileDesc {
                device_budget: Some(budget),
                ..CompileDesc::default()
            };
            let mut model = rt.compile_with(&g, &desc).map_err(fail("compile_with"))?;
            feed_bytes(ctx, &mut model, &g, &feeds).await?;
            let got = outputs(ctx, &mut model, &[z]).await?;
            check(got == want, || {
                format!("{format:?}, staging forced {force_staging}: outputs differ")
            })?;
            let r = model.memory_report();
            let o = r.offload.ok_or("a budgeted model reports its offload")?;
            check(r.peak_device_bytes <= budget, || {
                format!(
                    "{format:?}: peak {} over budget {budget}",
                    r.peak_device_bytes
                )
            })?;
            if !o.unified {
                let per_run = o.bytes_to_device / r.runs.max(1);
                check(per_run < 16 << 10, || {
                    format!("{format:?}: {per_run} bytes moved per run: more than the rows")
                })?;
            }
        }
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}

/// Compiles `graph` (random graph `seed`, needing `need` bytes unbudgeted) with `desc` under
/// `budget`, offloading tensors of any size; a budget below the tightest op is raised to what that
/// op needs. Returns the model and the budget it compiled under.
fn compile_within(
    rt: &Runtime,
    graph: &Graph,
    desc: CompileDesc,
    mut budget: u64,
    need: u64,
    seed: u64,
) -> Result<(Model, u64), String> {
    loop {
        let desc = CompileDesc {
            device_budget: Some(budget),
            min_offload_size: 0,
            ..desc.clone()
        };
        match rt.compile_with(graph, &desc) {
            Ok(m) => return Ok((m, budget)),
            Err(Error::BudgetBelowWorkingSet { needed, .. }) if budget < need => {
                budget = needed.max(budget + 1).min(need);
            }
            Err(e) => return Err(format!("graph {seed} at {budget} of {need}: {e}")),
        }
    }
}

/// `a = relu(x)` branches off the input and is read by the first layer and the last op; four
/// layers `h = (h + v_k) + (h + w_k)` peak with `x`, `a`, both addends and `h` live. `chained`:
/// `a = x + relu(e)` instead (a small second input `e` broadcast), so that re-running `a` needs
/// `relu(e)`, gone by then, re-run first. Returns the graph, its feeds, the output, the bytes of
/// one activation and those of `relu(e)` (0 without the chain).
fn branch_graph(chained: bool) -> Result<(Graph, Feeds, TensorId, u64, u64), String> {
    const LEN: usize = 16 << 10;
    const W: usize = 256;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[LEN]);
    let f32s = |v: Vec<f32>| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut feeds = vec![(
        x,
        f32s((0..LEN).map(|i| (i % 23) as f32 * 0.37 - 4.0).collect()),
    )];
    let (a, small) = if chained {
        let e = g.input("e", DType::F32, &[W]);
        feeds.push((e, f32s((0..W).map(|i| (i % 7) as f32 - 3.0).collect())));
        let relu = Op::Relu { len: W as u32 };
        let s = g.op(relu, &[e], &[W], "small").map_err(fail("graph"))?;
        let add = Op::Add {
            len: LEN as u32,
            b_len: W as u32,
        };
        let a = g
            .op(add, &[x, s], &[LEN], "branch")
            .map_err(fail("graph"))?;
        (a, 4 * W as u64)
    } else {
        let relu = Op::Relu { len: LEN as u32 };
        (
            g.op(relu, &[x], &[LEN], "branch").map_err(fail("graph"))?,
            0,
        )
    };
    let add = |b_len: usize| Op::Add {
        len: LEN as u32,
        b_len: b_len as u32,
    };
    let mut h = a;
    for k in 0..4 {
        let v = g.weight(&format!("v{k}"), DType::F32, &[W]);
        let w = g.weight(&format!("w{k}"), DType::F32, &[W]);
        for (j, t) in [v, w].into_iter().enumerate() {
            let data = (0..W).map(|i| ((i * 5 + k * 3 + j) % 13) as f32 - 6.5);
            feeds.push((t, f32s(data.collect())));
        }
        let p = g.op(add(W), &[h, v], &[LEN], &format!("addv{k}"));
        let p = p.map_err(fail("graph"))?;
        let q = g.op(add(W), &[h, w], &[LEN], &format!("addw{k}"));
        let q = q.map_err(fail("graph"))?;
        h = g
            .op(add(LEN), &[p, q], &[LEN], &format!("sum{k}"))
            .map_err(fail("graph"))?;
    }
    let y = g
        .op(add(LEN), &[h, a], &[LEN], "residual")
        .map_err(fail("graph"))?;
    g.output(y);
    Ok((g, feeds, y, 4 * LEN as u64, small))
}

/// Issue 45: under a budget half an activation below the peak, `a` leaves; with staging forced
/// it is re-run from `x` before the residual (nothing is copied out; in the chained graph after
/// `relu(e)`), and on every path the outputs equal the unbudgeted run's.
async fn recomputed_equals_unbudgeted(ctx: &Ctx) -> R {
    for (force_staging, chained) in [(false, false), (true, false), (true, true)] {
        let rt = staged_runtime(ctx, force_staging)?;
        let (g, feeds, y, bytes, small) = branch_graph(chained)?;
        let mut plain = rt.compile(&g).map_err(fail("compile"))?;
        feed_bytes(ctx, &mut plain, &g, &feeds).await?;
        let want = outputs(ctx, &mut plain, &[y]).await?;
        drop(plain);
        let align = {
            let c = ctx.backend.capabilities();
            c.binding_align.max(c.copy_align).max(1).next_power_of_two()
        };
        // The weights and, chained, `e` and `relu(e)`: each under one alignment unit.
        let budget = 4 * bytes + bytes / 2 + 10 * (1024u64).next_multiple_of(align);
        let desc = CompileDesc {
            device_budget: Some(budget),
            min_offload_size: 0,
            ..CompileDesc::default()
        };
        let mut model = rt.compile_with(&g, &desc).map_err(fail("compile_with"))?;
        feed_bytes(ctx, &mut model, &g, &feeds).await?;
        let got = outputs(ctx, &mut model, &[y]).await?;
        check(got == want, || {
            format!("staging forced {force_staging}, chained {chained}: outputs differ")
        })?;
        let r = model.memory_report();
        let o = r.offload.ok_or("a budgeted model reports its offload")?;
        check(r.peak_device_bytes <= budget, || {
            format!("peak {} over budget {budget}", r.peak_device_bytes)
        })?;
        if !o.unified {
            let runs = r.runs.max(1);
            let want = bytes + small;
            check(o.bytes_recomputed / runs == want, || {
                format!(
                    "{} bytes recomputed per run, want {want}: {o:?}",
                    o.bytes_recomputed / runs
                )
            })?;
        }
        drop(model);
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}
