//! Tensors larger than the device's largest block, held in segments across blocks (issue 13):
//! round trips, every op the validating front can cut against the host reference, ops it cannot
//! cut refused by name, free and reuse, and the budget. Each case lowers the block and binding
//! limits through [`RuntimeConfig::limits`] to a few KiB, so WebGPU's 256 MiB / 128 MiB paths run
//! on every target with small tensors.

use tensormem::graph::TensorKind;
use tensormem::ops::samples::compare_f32;
use tensormem::ops::{DType, Op, WeightFormat, host, samples};
use tensormem::{DeviceLimits, Error, PoolConfig, Runtime, RuntimeConfig, Tensor};
use tensormem::{Graph, TensorId};

use super::Rng;
use crate::{Case, Ctx, case, check, fail};

type R = std::result::Result<(), String>;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("segmented_round_trip", round_trip),
        case!("segmented_ops_match_host_reference", ops_match_host),
        case!("segmented_operand_an_op_cannot_cut_is_refused", refused),
        case!("segmented_free_reuse_and_budget", free_reuse_budget),
        case!("segmented_model_weight_and_activations", model),
    ]
}

/// A runtime whose blocks hold at most `block` bytes and bindings `binding` bytes.
pub(crate) fn limited(
    ctx: &Ctx,
    block: u64,
    binding: u64,
    budget: Option<u64>,
) -> Result<Runtime, String> {
    ctx.runtime(RuntimeConfig {
        limits: DeviceLimits {
            max_block_size: Some(block),
            max_binding_size: Some(binding),
        },
        device: PoolConfig {
            budget,
            statistics: true,
            ..PoolConfig::device()
        },
        ..RuntimeConfig::default()
    })
    .map_err(fail("runtime with lowered limits"))
}

/// `t` is held in more than one segment, none beyond `block` bytes.
fn segmented(t: &Tensor, block: u64, what: &str) -> R {
    let n = t.segments().len();
    check(n > 1, || {
        format!(
            "{what}: {} bytes in {n} segment(s) under a {block}-byte block limit",
            t.size()
        )
    })?;
    match t.segments().iter().find(|a| a.range.size > block) {
        Some(a) => Err(format!(
            "{what}: a segment of {} bytes beyond the {block}-byte block limit",
            a.range.size
        )),
        None => Ok(()),
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Tensors of several dtypes and shapes beyond the block limit (cut between rows, or between
/// elements when a row group is too large for a block; odd byte lengths) go up and come back
/// unchanged, through `tensor_from` and `upload`.
async fn round_trip(ctx: &Ctx) -> R {
    let block = 4096;
    let rt = limited(ctx, block, block, None)?;
    let shapes: [(DType, &[usize]); 6] = [
        (DType::F32, &[3001]),
        (DType::F32, &[300, 5]),
        (DType::F32, &[3, 2000]),
        (DType::U8, &[10_001]),
        (DType::F16, &[4099]),
        (DType::I32, &[2, 64, 33]),
    ];
    for (i, (dtype, shape)) in shapes.into_iter().enumerate() {
        let n = shape.iter().product::<usize>() * dtype.size() as usize;
        let data = pattern(n, i as u8);
        let what = format!("{} {shape:?}", dtype.name());
        let t = ctx
            .tensor_from(&rt, dtype, shape, &data, "segmented")
            .await
            .map_err(fail(&what))?;
        segmented(&t, block, &what)?;
        let back = ctx.download::<u8>(&rt, &t).await.map_err(fail(&what))?;
        check(back == data, || {
            format!("{what}: bytes changed on the round trip")
        })?;
        let other = pattern(n, 100 + i as u8);
        ctx.upload(&rt, &t, &other).await.map_err(fail(&what))?;
        let back = ctx.download::<u8>(&rt, &t).await.map_err(fail(&what))?;
        check(back == other, || {
            format!("{what}: bytes changed on the second upload")
        })?;
        rt.free(t).map_err(fail("free"))?;
    }
    rt.check_leaks().map_err(fail("leaks"))
}

/// Every op the front can cut, over operands shaped along its split axis and held in segments
/// (the largest in two or more), with bindings limited below a segment too, matches the host.
async fn ops_match_host(ctx: &Ctx) -> R {
    let mut rng = Rng::new(29);
    for op in samples::segment_instances() {
        let shapes = op
            .split_shapes()
            .ok_or_else(|| format!("{op:?} has no split axis"))?;
        let sig = op.signature().map_err(fail("signature"))?;
        let operands: Vec<_> = sig.inputs.iter().chain(&sig.outputs).collect();
        // Half the largest growing operand per block; the operands read whole fit one binding.
        let widest = operands
            .iter()
            .zip(&shapes)
            .filter(|(_, s)| s.is_some())
            .map(|(o, _)| o.size())
            .max()
            .unwrap_or(0);
        let whole = operands
            .iter()
            .zip(&shapes)
            .filter(|(_, s)| s.is_none())
            .map(|(o, _)| o.size())
            .max()
            .unwrap_or(0);
        let block = (widest / 2)
            .next_multiple_of(4)
            .max(whole.next_multiple_of(256))
            .max(256);
        let binding = (block / 2).max(whole.next_multiple_of(256)).max(256);
        let rt = limited(ctx, block, binding, None)?;
        let inputs = samples::inputs(&op, &mut rng).map_err(fail("inputs"))?;
        let want = samples::reference(&op, &inputs).map_err(fail("host reference"))?;
        let mut tensors = Vec::new();
        for ((data, o), shape) in inputs.iter().zip(&sig.inputs).zip(&shapes) {
            let bytes = (o.len * o.dtype.size()) as usize;
            let shape = shape.map_or_else(|| vec![o.len as usize], |s| s.to_vec());
            let t = ctx
                .tensor_from(&rt, o.dtype, &shape, &data[..bytes], "op input")
                .await
                .map_err(fail(&format!("{} input {shape:?}", op.name())))?;
            tensors.push(t);
        }
        let out = sig.outputs[0];
        let out_shape = shapes
            .last()
            .copied()
            .flatten()
            .map_or_else(|| vec![out.len as usize], |s| s.to_vec());
        let output = rt
            .alloc(out.dtype, &out_shape, "op output")
            .map_err(fail("output"))?;
        let all: Vec<&Tensor> = tensors.iter().chain([&output]).collect();
        check(all.iter().any(|t| t.segments().len() > 1), || {
            format!("{op:?}: no operand was segmented under a {block}-byte block limit")
        })?;
        let inputs: Vec<&Tensor> = tensors.iter().collect();
        rt.dispatch(&op, &inputs, &[&output])
            .map_err(fail(&format!(
                "dispatch {op:?} (blocks {block}, bindings {binding})"
            )))?;
        let got = ctx
            .download::<u8>(&rt, &output)
            .await
            .map_err(fail("download"))?;
        samples::check(&op, &got, &want)
            .map_err(|e| format!("{op:?} over segments of {block} bytes: {e}"))?;
        for t in tensors.into_iter().chain([output]) {
            rt.free(t).map_err(fail("free"))?;
        }
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}

/// An op that reads a segmented operand whole (a matmul weight), has no axis to cut along (a
/// permute that moves the outermost axis), or whose unit a segment boundary falls inside (rows
/// given as a flat tensor) is refused with an error naming the op and the operand, before
/// anything runs: the output keeps its bytes.
async fn refused(ctx: &Ctx) -> R {
    let block = 4096;
    let rt = limited(ctx, block, block, None)?;
    let f32s = |n: usize| -> Vec<f32> { (0..n).map(|i| i as f32).collect() };
    let expect = |got: tensormem::Result<tensormem::Ticket>, op: &str, operand: &str| -> R {
        match got {
            Err(Error::SegmentedOperand {
                op: o,
                operand: name,
                segments,
                ..
            }) if o == op && name == operand && segments > 1 => Ok(()),
            other => Err(format!("{op} over a segmented `{operand}`: {other:?}")),
        }
    };
    // A weight of 64 x 32 floats (8 KiB) is two segments; the matmul reads it whole.
    let matmul = Op::MatMul {
        batch: 1,
        m: 4,
        n: 32,
        k: 64,
        trans_a: false,
        trans_b: false,
        broadcast_b: true,
        bias: false,
        alpha: 1.0,
        weight_format: tensormem::ops::WeightFormat::F32,
    };
    let a = ctx
        .tensor_from(&rt, DType::F32, &[4, 64], &f32s(256), "a")
        .await
        .map_err(fail("a"))?;
    let b = ctx
        .tensor_from(&rt, DType::F32, &[64, 32], &f32s(2048), "b")
        .await
        .map_err(fail("b"))?;
    segmented(&b, block, "matmul weight")?;
    let c = ctx
        .tensor_from(&rt, DType::F32, &[4, 32], &[7.0f32; 128], "c")
        .await
        .map_err(fail("c"))?;
    expect(rt.dispatch(&matmul, &[&a, &b], &[&c]), "matmul", "b")?;
    // A permute that moves the outermost axis has no axis to cut along.
    let permute = Op::Permute {
        dims: [8, 16, 4, 4],
        perm: [1, 0, 2, 3],
    };
    let x = ctx
        .tensor_from(&rt, DType::F32, &[8, 16, 4, 4], &f32s(2048), "x")
        .await
        .map_err(fail("x"))?;
    let y = rt
        .alloc(DType::F32, &[16, 8, 4, 4], "y")
        .map_err(fail("y"))?;
    expect(rt.dispatch(&permute, &[&x], &[&y]), "permute", "x")?;
    // Rows of 40 floats given flat are cut between elements, inside a row.
    let layernorm = Op::LayerNorm {
        rows: 64,
        cols: 40,
        eps: 1e-5,
    };
    let flat = ctx
        .tensor_from(&rt, DType::F32, &[64 * 40], &f32s(2560), "flat")
        .await
        .map_err(fail("flat"))?;
    let gamma = ctx
        .tensor_from(&rt, DType::F32, &[40], &[1.0f32; 40], "gamma")
        .await
        .map_err(fail("gamma"))?;
    let beta = ctx
        .tensor_from(&rt, DType::F32, &[40], &[0.0f32; 40], "beta")
        .await
        .map_err(fail("beta"))?;
    let out = rt
        .alloc(DType::F32, &[64, 40], "out")
        .map_err(fail("out"))?;
    expect(
        rt.dispatch(&layernorm, &[&flat, &gamma, &beta], &[&out]),
        "layernorm",
        "x",
    )?;
    let kept = ctx.download::<f32>(&rt, &c).await.map_err(fail("c back"))?;
    check(kept.iter().all(|&v| v == 7.0), || {
        "a refused op wrote its output".into()
    })?;
    for t in [a, b, c, x, y, flat, gamma, beta, out] {
        rt.free(t).map_err(fail("free"))?;
    }
    rt.check_leaks().map_err(fail("leaks"))
}

/// Freed segments are reused (no new blocks for a second tensor of the same size), a free while
/// an op on the tensor is in flight is deferred (the op's result is intact), and under a budget a
/// segmented tensor larger than the budget is hopeless (too large) while one that does not fit
/// now fails with a retryable out of memory holding nothing, then fits once memory is freed.
async fn free_reuse_budget(ctx: &Ctx) -> R {
    let block = 4096;
    let rt = limited(ctx, block, block, Some(64 << 10))?;
    let n = 5000; // 20 000 bytes: five segments
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let tx = ctx
        .tensor_from(&rt, DType::F32, &[n], &x, "x")
        .await
        .map_err(fail("x"))?;
    let ty = rt.alloc(DType::F32, &[n], "y").map_err(fail("y"))?;
    segmented(&ty, block, "y")?;
    rt.dispatch(&Op::Relu { len: n as u32 }, &[&tx], &[&ty])
        .map_err(fail("relu"))?;
    // Free the input while the op may still read it; a new tensor of its size must not disturb
    // the op.
    rt.free(tx).map_err(fail("free x"))?;
    let blocks = rt.device_pool().stats().blocks_allocated;
    let tz = ctx
        .tensor_from(&rt, DType::F32, &[n], &vec![9.0f32; n], "z")
        .await
        .map_err(fail("z"))?;
    let y = ctx
        .download::<f32>(&rt, &ty)
        .await
        .map_err(fail("y back"))?;
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    check(y == want, || {
        "relu over segments, input freed in flight: wrong result".into()
    })?;
    rt.free(tz).map_err(fail("free z"))?;
    ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
    let again = rt.alloc(DType::F32, &[n], "again").map_err(fail("again"))?;
    check(
        rt.device_pool().stats().blocks_allocated <= blocks + 5,
        || "freed segments were not reused".into(),
    )?;
    rt.free(again).map_err(fail("free"))?;
    // 40 000 floats (160 KB) can never fit a 64 KiB budget: hopeless, whatever is freed.
    let in_use = rt.allocation_stats().map(|s| s.in_use);
    match rt.alloc(DType::F32, &[40_000], "too big") {
        Err(e @ Error::TooLarge { .. }) if !e.is_retryable() => {}
        other => return Err(format!("a segmented tensor beyond the budget: {other:?}")),
    }
    // With y (20 KB) and 36 KB more held, 16 KB in four segments does not fit now: out of
    // memory at a later segment, retryable, holding none of the earlier ones; it fits once the
    // 36 KB are freed.
    let held = rt
        .alloc(DType::F32, &[9000], "held")
        .map_err(fail("held"))?;
    let in_use_held = rt.allocation_stats().map(|s| s.in_use);
    match rt.alloc(DType::F32, &[4000], "no room now") {
        Err(e @ Error::OutOfMemory(_)) if e.is_retryable() => {}
        other => {
            return Err(format!(
                "a segmented tensor beyond the room left: {other:?}"
            ));
        }
    }
    check(
        rt.allocation_stats().map(|s| s.in_use) == in_use_held,
        || "a failed segmented allocation held memory".into(),
    )?;
    rt.free(held).map_err(fail("free held"))?;
    ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
    check(rt.allocation_stats().map(|s| s.in_use) == in_use, || {
        "freeing a segmented tensor left memory in use".into()
    })?;
    let fits = rt
        .alloc(DType::F32, &[4000], "fits")
        .map_err(fail("after OOM"))?;
    segmented(&fits, block, "after OOM")?;
    rt.free(fits).map_err(fail("free"))?;
    rt.free(ty).map_err(fail("free y"))?;
    rt.check_leaks().map_err(fail("leaks"))
}

/// A compiled model whose weight, activations and output are larger than a block (so held in
/// segments, the activations outside the one-block planned arena) next to a small planned tail,
/// run twice, matches the host reference op by op; a graph whose matmul reads a segmented weight
/// whole is refused at compile time by name, holding nothing.
async fn model(ctx: &Ctx) -> R {
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
    let proj = Op::MatMul {
        batch: 1,
        m: rows,
        n: 2,
        k: cols,
        trans_a: false,
        trans_b: true,
        broadcast_b: true,
        bias: false,
        alpha: 1.0,
        weight_format: WeightFormat::F32,
    };
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
        let ins: Vec<Vec<u8>> = ins.iter().map(|v| bytemuck_bytes(v)).collect();
        let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
        let mut o = vec![0u8; n as usize * 4];
        host::run(op, &refs, &mut [o.as_mut_slice()]).map_err(fail("host"))?;
        Ok(o.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
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
        let b = bytemuck_bytes(d);
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
        compare_f32(&bytemuck_bytes(&got), &bytemuck_bytes(&want_y), 1e-4)
            .map_err(|e| format!("run {round}, segmented output: {e}"))?;
        let got: Vec<f32> = ctx.read_output(&m, out).await.map_err(fail("read out"))?;
        compare_f32(&bytemuck_bytes(&got), &bytemuck_bytes(&want_out), 1e-4)
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
    let mm = Op::MatMul {
        batch: 1,
        m: 4,
        n: 4,
        k: 2048,
        trans_a: false,
        trans_b: false,
        broadcast_b: true,
        bias: false,
        alpha: 1.0,
        weight_format: WeightFormat::F32,
    };
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

fn bytemuck_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
