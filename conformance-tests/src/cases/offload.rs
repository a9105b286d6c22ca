//! Budgeted compilation (issue 16): a graph compiled within a device budget runs with outputs
//! bit-identical to the unbudgeted run of the same graph on the same target, its device pool never
//! reserves more than the budget, and a budget below one op's operands is a typed error naming
//! that op. Each graph runs twice: on the target as it is (unified memory binds offloaded tensors
//! in place) and with staging forced (every offload copy runs, as on a discrete GPU).

use tensormem::graph::TensorKind;
use tensormem::ops::{DType, Op};
use tensormem::{CompileDesc, DevicePool, Error, Graph, Model, RuntimeConfig, TensorId};

use super::graphs::{RandomGraph, bytes, random_graph};
use crate::{Case, Ctx, case, check, fail};

type R = std::result::Result<(), String>;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("offload: budgeted graph run equals the unbudgeted run", budgeted_equals_unbudgeted, native_only: "budgeted compilation waits synchronously (refused on wasm32)"),
        case!("offload: budget below an op's operands names the op", budget_below_working_set, native_only: "budgeted compilation waits synchronously (refused on wasm32)"),
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

async fn budgeted_equals_unbudgeted(ctx: &Ctx) -> R {
    let mut moved = 0u64;
    for force_staging in [false, true] {
        let rt = ctx
            .runtime(RuntimeConfig {
                force_staging,
                ..RuntimeConfig::default()
            })
            .map_err(fail("runtime"))?;
        for seed in 1..=12 {
            let rg = random_graph(seed)?;
            let mut plain = rt.compile(&rg.graph).map_err(fail("compile"))?;
            feed(ctx, &mut plain, &rg).await?;
            let want = outputs(ctx, &mut plain, &rg.outputs).await?;
            let need = plain.memory_report().unbudgeted_device_bytes();
            drop(plain);
            // Half of the need, raised to what the tightest op needs when that is more.
            let mut budget = need / 2;
            let mut model = loop {
                let desc = CompileDesc {
                    device_budget: Some(budget),
                    min_offload_size: 0,
                    ..CompileDesc::default()
                };
                match rt.compile_with(&rg.graph, &desc) {
                    Ok(m) => break m,
                    Err(Error::BudgetBelowWorkingSet { needed, .. }) if budget < need => {
                        budget = needed.max(budget + 1).min(need);
                    }
                    Err(e) => return Err(format!("graph {seed} at {budget} of {need}: {e}")),
                }
            };
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

async fn budget_below_working_set(ctx: &Ctx) -> R {
    let rt = ctx
        .runtime(RuntimeConfig {
            force_staging: true,
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
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
