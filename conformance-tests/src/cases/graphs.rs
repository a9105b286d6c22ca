//! Liveness reuse: random graphs whose intermediates share memory under a static plan give the
//! same results as the same ops with no reuse at all (every tensor in its own host buffer).

use tensormem::ops::{DType, Op, host};
use tensormem::{Graph, TensorId};

use super::{Rng, bytes, floats, runtime};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};
use tensormem::ops::samples::compare_f32;

pub(crate) fn cases() -> Vec<Case> {
    vec![case!("planned_reuse_matches_no_reuse", planned_reuse)]
}

pub(super) struct RandomGraph {
    pub(super) graph: Graph,
    /// (tensor, data) of inputs and weights.
    pub(super) feeds: Vec<(TensorId, Vec<f32>)>,
    pub(super) outputs: Vec<TensorId>,
    /// Every tensor's value computed on the host with no reuse, by tensor index.
    reference: Vec<Option<Vec<f32>>>,
}

pub(super) fn random_graph(seed: u64) -> Result<RandomGraph, String> {
    let mut rng = Rng::new(seed);
    let rows = 1 + rng.below(12) as u32;
    let cols = 4 + rng.below(60) as u32;
    let len = rows * cols;
    let shape = [rows as usize, cols as usize];
    let mut g = Graph::new();
    let mut feeds = Vec::new();
    let mut reference: Vec<Option<Vec<f32>>> = Vec::new();
    let mut feed = |g: &mut Graph,
                    reference: &mut Vec<Option<Vec<f32>>>,
                    rng: &mut Rng,
                    name: &str,
                    shape: &[usize],
                    weight: bool| {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let t = if weight {
            g.weight(name, DType::F32, shape)
        } else {
            g.input(name, DType::F32, shape)
        };
        reference.resize(t.index() + 1, None);
        reference[t.index()] = Some(data.clone());
        feeds.push((t, data));
        t
    };
    let x = feed(&mut g, &mut reference, &mut rng, "x", &shape, false);
    let w = feed(
        &mut g,
        &mut reference,
        &mut rng,
        "w",
        &[cols as usize, cols as usize],
        true,
    );
    let gamma = feed(
        &mut g,
        &mut reference,
        &mut rng,
        "gamma",
        &[cols as usize],
        true,
    );
    let beta = feed(
        &mut g,
        &mut reference,
        &mut rng,
        "beta",
        &[cols as usize],
        true,
    );
    let mut values = vec![x];
    let steps = 8 + rng.below(25);
    for step in 0..steps {
        let a = values[values.len() - 1 - rng.below(values.len().min(4) as u64) as usize];
        let b = values[rng.below(values.len() as u64) as usize];
        let (op, inputs): (Op, Vec<TensorId>) = match rng.below(8) {
            0 => (Op::Add { len, b_len: len }, vec![a, b]),
            1 => (Op::Mul { len, b_len: len }, vec![a, b]),
            2 => (Op::Scale { len, alpha: 0.5 }, vec![a]),
            3 => (Op::Relu { len }, vec![a]),
            4 => (Op::Gelu { len }, vec![a]),
            5 => (
                Op::LayerNorm {
                    rows,
                    cols,
                    eps: 1e-5,
                },
                vec![a, gamma, beta],
            ),
            6 => (
                Op::Softmax {
                    rows,
                    cols,
                    masked: false,
                    rows_per_mask: 1,
                },
                vec![a],
            ),
            _ => (
                Op::matmul((1, rows, cols, cols), false, true, true, false, 0.25),
                vec![a, w],
            ),
        };
        let out = g
            .op(op.clone(), &inputs, &shape, &format!("step{step}"))
            .map_err(fail("graph"))?;
        let ins: Vec<Vec<u8>> = inputs
            .iter()
            .map(|t| {
                reference[t.index()]
                    .as_deref()
                    .map(bytes)
                    .ok_or("missing reference")
            })
            .collect::<Result<_, _>>()?;
        let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
        let mut o = vec![0u8; len as usize * 4];
        host::run(&op, &refs, &mut [o.as_mut_slice()]).map_err(fail("host"))?;
        reference.resize(out.index() + 1, None);
        reference[out.index()] = Some(floats(&o));
        values.push(out);
    }
    let last = values[values.len() - 1];
    let mid = values[1 + rng.below(values.len() as u64 - 1) as usize];
    g.output(last);
    g.output(mid);
    Ok(RandomGraph {
        graph: g,
        feeds,
        outputs: vec![last, mid],
        reference,
    })
}

async fn planned_reuse(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let mut reused = 0;
    let graphs = 40;
    for seed in 1..=graphs {
        let rg = random_graph(seed)?;
        let mut model = rt.compile(&rg.graph).map_err(fail("compile"))?;
        for (t, data) in &rg.feeds {
            let b = bytes(data);
            match rg.graph.decl(*t).map_err(fail("decl"))?.kind {
                tensormem::graph::TensorKind::Weight => ctx.set_weight(&mut model, *t, &b).await,
                _ => ctx.set_input(&mut model, *t, &b).await,
            }
            .map_err(fail("feed"))?;
        }
        // Twice: the second run reuses the same arena with stale bytes from the first.
        for _ in 0..2 {
            ctx.run(&mut model).await.map_err(fail("run"))?;
            for &o in &rg.outputs {
                let got: Vec<f32> = ctx.read_output(&model, o).await.map_err(fail("read"))?;
                let want = rg.reference[o.index()].as_ref().ok_or("no reference")?;
                compare_f32(&bytes(&got), &bytes(want), 1e-4)
                    .map_err(|e| format!("graph {seed} output {}: {e}", o.index()))?;
            }
        }
        let r = model.memory_report();
        check(
            r.activation_planned_bytes >= r.activation_lower_bound_bytes,
            || format!("peak below the lower bound: {r:?}"),
        )?;
        check(
            r.activation_planned_bytes <= r.activation_no_reuse_bytes,
            || format!("plan worse than no reuse: {r:?}"),
        )?;
        if r.activation_planned_bytes < r.activation_no_reuse_bytes {
            reused += 1;
        }
    }
    check(reused > graphs / 2, || {
        format!("only {reused} of {graphs} graphs shared any memory")
    })
}
