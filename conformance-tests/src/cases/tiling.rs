//! Graph views and tiling (issues 16, 45): an attention chain tiled into parts ([`Graph::tile`])
//! and a feed-forward block tiled by rows compute the untiled graph's outputs bit for bit,
//! compiled plainly and within a budget the untiled chain cannot meet; a view past its tensor is a typed error; a view an op binds off the
//! target's `binding_align` is refused by the compiler with the numbers.

use tensormem::graph::samples::{self, Attention};
use tensormem::ops::{DType, Op};
use tensormem::{CompileDesc, Error, Graph, Model, Runtime, RuntimeConfig, TensorId};

use super::{runtime, staged_runtime};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "tiled_attention_equals_untiled",
            tiled_attention_equals_untiled
        ),
        case!("tiled_attention_within_a_budget_only_it_meets", tiled_attention_within_a_budget_only_it_meets, native_only: "budgeted compilation waits synchronously (refused on wasm32)"),
        case!(
            "tiled_feed_forward_equals_untiled",
            tiled_feed_forward_equals_untiled
        ),
        case!("tiled_feed_forward_within_a_budget", tiled_feed_forward_within_a_budget, native_only: "budgeted compilation waits synchronously (refused on wasm32)"),
        case!("staged_tiling_equals_untiled", staged_tiling_equals_untiled),
        case!(
            "views_out_of_range_or_off_binding_align",
            views_out_of_range_or_off_binding_align
        ),
    ]
}

/// Attention over `B` sentences of `S` tokens, `H` heads of `D`: every view the tiling makes sits
/// on 256 bytes (the largest `binding_align` of the targets: a mask part is 4·64·4/parts bytes).
const B: usize = 4;
const S: usize = 64;
const H: usize = 2;
const D: usize = 8;

fn attention() -> Result<Attention, String> {
    samples::attention(B, S, H, D, 16).map_err(fail("graph"))
}

/// The output's bits after two runs (the second over the first's stale bytes).
async fn run(ctx: &Ctx, model: &mut Model, a: &Attention) -> Result<Vec<u32>, String> {
    for (t, data) in &a.inputs {
        ctx.set_input(model, *t, bytemuck::cast_slice(data))
            .await
            .map_err(fail("set input"))?;
    }
    let mut bits = Vec::new();
    for _ in 0..2 {
        ctx.run(model).await.map_err(fail("run"))?;
        let got: Vec<f32> = ctx.read_output(model, a.out).await.map_err(fail("read"))?;
        bits = got.iter().map(|x| x.to_bits()).collect();
    }
    Ok(bits)
}

fn tiled(parts: u32) -> Result<Attention, String> {
    let mut a = attention()?;
    a.graph.tile(a.chain.clone(), parts).map_err(fail("tile"))?;
    Ok(a)
}

async fn tiled_attention_equals_untiled(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let whole = attention()?;
    let mut plain = rt.compile(&whole.graph).map_err(fail("compile"))?;
    let want = run(ctx, &mut plain, &whole).await?;
    let arena = plain.memory_report().activation_planned_bytes;
    drop(plain);
    for parts in [2u32, 4] {
        let a = tiled(parts)?;
        check(a.graph.nodes().len() == 2 + 3 * parts as usize, || {
            format!("{parts} parts: {} nodes", a.graph.nodes().len())
        })?;
        let unused = samples::unused_tensors(&a.graph);
        check(unused.is_empty(), || {
            format!("{parts} parts: tensors {unused:?} are declared but unused")
        })?;
        let mut model = rt.compile(&a.graph).map_err(fail("compile tiled"))?;
        let got = run(ctx, &mut model, &a).await?;
        check(got == want, || {
            format!("{parts} parts: the output differs from the untiled graph's")
        })?;
        let tiled_arena = model.memory_report().activation_planned_bytes;
        check(tiled_arena < arena, || {
            format!("{parts} parts: arena {tiled_arena} not below the untiled {arena}")
        })?;
    }
    rt.check_leaks().map_err(fail("leaks"))
}

/// Staged tiling ([`Graph::tile_staged`]): the parts read and write tensors of their own, copied
/// from and into the chain's edge tensors; attention and a feed-forward block give the untiled
/// outputs bit for bit.
async fn staged_tiling_equals_untiled(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let samples = [
        ("attention", attention()?, 4u32),
        (
            "feed-forward",
            samples::feed_forward(512, 64, 640, 45).map_err(fail("graph"))?,
            2,
        ),
    ];
    for (what, whole, parts) in samples {
        let mut plain = rt.compile(&whole.graph).map_err(fail("compile"))?;
        let want = run(ctx, &mut plain, &whole).await?;
        drop(plain);
        let mut a = whole;
        let untiled_nodes = a.graph.nodes().len();
        a.graph
            .tile_staged(a.chain.clone(), parts)
            .map_err(fail("tile staged"))?;
        let copies = a
            .graph
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Copy { .. }))
            .count();
        check(copies > 0 && a.graph.nodes().len() > untiled_nodes, || {
            format!(
                "{what}: {copies} staging copies in {} nodes",
                a.graph.nodes().len()
            )
        })?;
        let mut model = rt.compile(&a.graph).map_err(fail("compile staged"))?;
        let got = run(ctx, &mut model, &a).await?;
        check(got == want, || {
            format!("{what}: the staged tiling's output differs from the untiled graph's")
        })?;
    }
    rt.check_leaks().map_err(fail("leaks"))
}

/// A feed-forward block over 512 tokens (up-projection, gelu, down-projection with a `k` of
/// 640, residual, norm): every part's views sit on 256 bytes.
fn feed_forward(parts: u32) -> Result<Attention, String> {
    let mut a = samples::feed_forward(512, 64, 640, 45).map_err(fail("graph"))?;
    a.graph.tile(a.chain.clone(), parts).map_err(fail("tile"))?;
    Ok(a)
}

async fn tiled_feed_forward_equals_untiled(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let whole = feed_forward(1)?;
    let mut plain = rt.compile(&whole.graph).map_err(fail("compile"))?;
    let want = run(ctx, &mut plain, &whole).await?;
    drop(plain);
    let a = feed_forward(2)?;
    let mut model = rt.compile(&a.graph).map_err(fail("compile tiled"))?;
    let got = run(ctx, &mut model, &a).await?;
    check(got == want, || {
        "the row-split block's output differs from the untiled one's".to_string()
    })?;
    drop(model);
    rt.check_leaks().map_err(fail("leaks"))
}

async fn tiled_feed_forward_within_a_budget(ctx: &Ctx) -> R {
    let rt = ctx
        .runtime(RuntimeConfig {
            force_staging: true,
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
    let whole = feed_forward(1)?;
    let mut plain = rt.compile(&whole.graph).map_err(fail("compile"))?;
    let want = run(ctx, &mut plain, &whole).await?;
    drop(plain);
    let a = feed_forward(2)?;
    // Below the untiled gelu's input and output (512·640 floats each): only the tiled block fits.
    let budget = 2 * 512 * 640 * 4 - 1;
    match rt.compile_with(
        &whole.graph,
        &CompileDesc {
            device_budget: Some(budget),
            min_offload_size: 0,
            ..CompileDesc::default()
        },
    ) {
        Err(Error::BudgetBelowWorkingSet { .. }) => {}
        Ok(_) => return Err(format!("the untiled block compiled within {budget}")),
        Err(e) => return Err(format!("untiled at {budget}: {e}")),
    }
    let desc = CompileDesc {
        device_budget: Some(budget),
        min_offload_size: 0,
        ..CompileDesc::default()
    };
    let mut model = rt
        .compile_with(&a.graph, &desc)
        .map_err(fail("compile tiled"))?;
    let got = run(ctx, &mut model, &a).await?;
    check(got == want, || {
        format!("within {budget}: the row-split block's output differs")
    })?;
    let peak = model.memory_report().peak_device_bytes;
    check(peak <= budget, || {
        format!("peak {peak} over the budget {budget}")
    })?;
    drop(model);
    rt.check_leaks().map_err(fail("leaks"))
}

async fn tiled_attention_within_a_budget_only_it_meets(ctx: &Ctx) -> R {
    for force_staging in [false, true] {
        let rt = staged_runtime(ctx, force_staging)?;
        let whole = attention()?;
        let mut plain = rt.compile(&whole.graph).map_err(fail("compile"))?;
        let want = run(ctx, &mut plain, &whole).await?;
        drop(plain);
        // The untiled softmax binds its scores, mask and probabilities: a budget a little above
        // the tiled chain's largest op but below that, with every tensor the chain does not bind
        // still resident, is met only by the tiled graph.
        let a = tiled(4)?;
        let budget = within(&rt, &a.graph, &whole.graph)?;
        let desc = CompileDesc {
            device_budget: Some(budget),
            min_offload_size: 0,
            ..CompileDesc::default()
        };
        // On unified memory the schedule may bind the untiled operands in host memory instead.
        let unified = ctx.backend.capabilities().device_host_visible && !force_staging;
        if !unified {
            match rt.compile_with(&whole.graph, &desc) {
                Err(Error::BudgetBelowWorkingSet { op, needed, .. }) => {
                    check(["scores", "probs"].contains(&op.as_str()), || {
                        format!("the untiled graph fails at '{op}'")
                    })?;
                    check(needed > budget, || format!("needed {needed} of {budget}"))?;
                }
                Ok(_) => return Err(format!("the untiled chain compiled within {budget}")),
                Err(e) => return Err(format!("untiled at {budget}: {e}")),
            }
        }
        let mut model = rt
            .compile_with(&a.graph, &desc)
            .map_err(fail("compile tiled"))?;
        let got = run(ctx, &mut model, &a).await?;
        check(got == want, || {
            format!("staging forced {force_staging}: the tiled budgeted output differs")
        })?;
        let r = model.memory_report();
        check(r.peak_device_bytes <= budget, || {
            format!("peak {} over the budget {budget}", r.peak_device_bytes)
        })?;
        drop(model);
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}

/// A budget between the tiled and the untiled graph's largest working set (every input resident,
/// as the schedule keeps inputs).
fn within(rt: &Runtime, tiled: &Graph, whole: &Graph) -> Result<u64, String> {
    let caps = rt.backend().capabilities();
    let align = caps.binding_align.max(caps.copy_align).max(1);
    let largest = |g: &Graph| -> Result<u64, String> {
        let mut most = 0u64;
        for n in g.nodes() {
            let mut roots: Vec<TensorId> = n
                .inputs
                .iter()
                .chain(std::iter::once(&n.output))
                .map(|&t| g.root(t))
                .collect();
            roots.sort();
            roots.dedup();
            let mut bytes = 0;
            for r in roots {
                bytes += g
                    .decl(r)
                    .map_err(fail("decl"))?
                    .size()
                    .map_err(fail("size"))?;
            }
            most = most.max(bytes);
        }
        Ok(most)
    };
    let inputs: u64 = (B * H * S * D * 3 + B * S) as u64 * 4 + 4 * align;
    let (small, big) = (largest(tiled)?, largest(whole)?);
    check(small + inputs < big, || {
        format!("the tiled chain's largest op {small} is not well below the untiled {big}")
    })?;
    Ok((small + inputs + big) / 2)
}

async fn views_out_of_range_or_off_binding_align(ctx: &Ctx) -> R {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[64]);
    match g.view(x, 200, &[32]) {
        Err(Error::OutOfBounds {
            offset: 200,
            size: 128,
            limit: 256,
            ..
        }) => {}
        other => return Err(format!("a view past its tensor: {other:?}")),
    }
    match g.view(x, 6, &[4]) {
        Err(Error::Misaligned {
            value: 6, align: 4, ..
        }) => {}
        other => return Err(format!("a view off its element size: {other:?}")),
    }
    // A view 4 bytes into `x`, read by an op: legal in the graph, refused by a device whose
    // bindings start on more than 4 bytes; where they may start anywhere, it reads those bytes.
    let v = g.view(x, 4, &[32]).map_err(fail("view"))?;
    let y = g
        .op(
            Op::Scale {
                len: 32,
                alpha: 2.0,
            },
            &[v],
            &[32],
            "scale",
        )
        .map_err(fail("op"))?;
    g.output(y);
    let rt = runtime(ctx)?;
    let align = ctx.backend.capabilities().binding_align;
    match rt.compile(&g) {
        Err(Error::Misaligned {
            value: 4,
            align: a,
            align_name: "binding_align",
            ..
        }) if a == align && align > 4 => {}
        Ok(mut model) if align <= 4 => {
            let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
            ctx.set_input(&mut model, x, bytemuck::cast_slice(&data))
                .await
                .map_err(fail("set"))?;
            ctx.run(&mut model).await.map_err(fail("run"))?;
            let got: Vec<f32> = ctx.read_output(&model, y).await.map_err(fail("read"))?;
            let want: Vec<f32> = (1..33).map(|i| 2.0 * i as f32).collect();
            check(got == want, || format!("the view read {got:?}"))?;
        }
        Ok(_) => {
            return Err(format!(
                "a view 4 bytes in compiled with binding_align {align}"
            ));
        }
        Err(e) => return Err(format!("binding_align {align}: {e}")),
    }
    // The host sets a whole input, never part of one.
    let mut h = Graph::new();
    let x = h.input("x", DType::F32, &[64]);
    let half = h.view(x, 128, &[32]).map_err(fail("view"))?;
    let y = h
        .op(Op::Relu { len: 64 }, &[x], &[64], "relu")
        .map_err(fail("op"))?;
    h.output(y);
    let mut model = rt.compile(&h).map_err(fail("compile"))?;
    match ctx.set_input(&mut model, half, &[0u8; 128]).await {
        Err(Error::Graph(tensormem::GraphError::PartialView { .. })) => {}
        other => return Err(format!("setting part of an input: {other:?}")),
    }
    drop(model);
    rt.check_leaks().map_err(fail("leaks"))
}
