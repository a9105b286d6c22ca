//! A compiled model whose weight, activations and output are held in segments, against the host
//! reference; a graph that reads a segmented weight whole refused at compile time.

use tensormem::graph::TensorKind;
use tensormem::ops::samples::compare_f32;
use tensormem::ops::{DType, Op, host};
use tensormem::{Error, Graph, TensorId};

use super::{R, limited};
use crate::cases::{Rng, bytes, floats};
use crate::{Ctx, check, fail};

/// A compiled model whose weight, activations and output are larger than a block (so held in
/// segments, the activations outside the one-block planned arena) next to a small planned tail,
/// run twice, matches the host reference op by op; a graph whose matmul reads a segmented weight
/// whole is refused at compile time by name, holding nothing.
pub(super) async fn model(ctx: &Ctx) -> R {
    let (rows, cols) = (256u32, 16u32);
    let len = rows * cols;
    let block = 8192; // x, w and the activations are 16 KiB: two segments each
    let rt = limited(ctx, block, 4096, None)?;
    let mut rng = Rng::new(41);
    let mut data = |n: u32| -> Vec<f32> { (0..n).map(|_| rng.f32() * 1.5).collect() };
    let shape = [rows as usize, cols as usize];
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &shape);
    let w = g.weight("w", DType::F32, &shape);
    let gamma = g.weight("gamma", DType::F32, &[cols as usize]);
    let beta = g.weight("beta", DType::F32, &[cols as usize]);
    let w2 = g.weight("w2", DType::F32, &[2, cols as usize]);
    let add = Op::Add { len, b_len: len };
    let gelu = Op::Gelu { len };
    let norm = Op::LayerNorm {
        rows,
        cols,
        eps: 1e-5,
    };
    let proj = Op::matmul((1, rows, 2, cols), false, true, true, false, 1.0);
    let scale = Op::Scale {
        len: rows * 2,
        alpha: -2.0,
    };
    let relu = Op::Relu { len: rows * 2 };
    let graph = |g: &mut Graph| -> tensormem::Result<[TensorId; 6]> {
        let h = g.op(add.clone(), &[x, w], &shape, "add")?;
        let a = g.op(gelu.clone(), &[h], &shape, "gelu")?;
        let y = g.op(norm.clone(), &[a, gamma, beta], &shape, "layernorm")?;
        let z = g.op(proj.clone(), &[y, w2], &[rows as usize, 2], "proj")?;
        let s = g.op(scale.clone(), &[z], &[rows as usize, 2], "scale")?;
        let out = g.op(relu.clone(), &[s], &[rows as usize, 2], "relu")?;
        Ok([h, a, y, z, s, out])
    };
    let [_, _, y, _, _, out] = graph(&mut g).map_err(fail("graph"))?;
    g.output(y);
    g.output(out);
    let feeds = [
        (x, data(len)),
        (w, data(len)),
        (gamma, data(cols)),
        (beta, data(cols)),
        (w2, data(2 * cols)),
    ];
    // The host reference, op by op.
    let run = |op: &Op, ins: &[&[f32]], n: u32| -> Result<Vec<f32>, String> {
        let ins: Vec<Vec<u8>> = ins.iter().map(|v| bytes(v)).collect();
        let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
        let mut o = vec![0u8; n as usize * 4];
        host::run(op, &refs, &mut [o.as_mut_slice()]).map_err(fail("host"))?;
        Ok(floats(&o))
    };
    let f = |t: TensorId| {
        feeds
            .iter()
            .find(|(id, _)| *id == t)
            .map(|(_, d)| d.as_slice())
            .unwrap_or(&[])
    };
    let h = run(&add, &[f(x), f(w)], len)?;
    let a = run(&gelu, &[&h], len)?;
    let want_y = run(&norm, &[&a, f(gamma), f(beta)], len)?;
    let z = run(&proj, &[&want_y, f(w2)], rows * 2)?;
    let s = run(&scale, &[&z], rows * 2)?;
    let want_out = run(&relu, &[&s], rows * 2)?;

    let mut m = rt.compile(&g).map_err(fail("compile"))?;
    for (t, d) in &feeds {
        let b = bytes(d);
        match g.decl(*t).map_err(fail("decl"))?.kind {
            TensorKind::Weight => ctx.set_weight(&mut m, *t, &b).await,
            _ => ctx.set_input(&mut m, *t, &b).await,
        }
        .map_err(fail("feed"))?;
    }
    check(rt.weights().report().bytes >= u64::from(len) * 4, || {
        "the segmented weight is not in the store".into()
    })?;
    for round in 0..2 {
        ctx.run(&mut m).await.map_err(fail("run"))?;
        let got: Vec<f32> = ctx.read_output(&m, y).await.map_err(fail("read y"))?;
        compare_f32(&bytes(&got), &bytes(&want_y), 1e-4)
            .map_err(|e| format!("run {round}, segmented output: {e}"))?;
        let got: Vec<f32> = ctx.read_output(&m, out).await.map_err(fail("read out"))?;
        compare_f32(&bytes(&got), &bytes(&want_out), 1e-4)
            .map_err(|e| format!("run {round}, planned tail: {e}"))?;
    }
    // The weight, the input, the two activations and the output are each held in two segments.
    let live = rt.device_pool().live_allocations();
    for name in ["w", "x", "add", "gelu", "layernorm"] {
        let label = format!("{name} [segment 2 of 2]");
        check(live.iter().any(|a| a.label == label), || {
            format!(
                "no allocation labelled '{label}' among {:?}",
                live.iter().map(|a| &a.label).collect::<Vec<_>>()
            )
        })?;
    }
    let r = m.memory_report();
    check(r.activation_planned_bytes <= block, || {
        format!("the planned arena outgrew a block: {r:?}")
    })?;
    drop(m);
    ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
    rt.check_leaks().map_err(fail("leaks after the model"))?;

    // A matmul reads its weight whole: a weight of 32 KiB cannot be segmented under it.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4, 2048]);
    let b = g.weight("b", DType::F32, &[2048, 4]);
    let mm = Op::matmul((1, 4, 4, 2048), false, false, true, false, 1.0);
    let o = g.op(mm, &[x, b], &[4, 4], "mm").map_err(fail("graph"))?;
    g.output(o);
    match rt.compile(&g) {
        Err(Error::SegmentedOperand { op, operand, .. }) if op == "matmul" && operand == "b" => {}
        Err(e) => return Err(format!("a matmul over a segmented weight: {e}")),
        Ok(_) => return Err("a matmul over a segmented weight compiled".into()),
    }
    rt.check_leaks()
        .map_err(fail("leaks after the refused compile"))
}
