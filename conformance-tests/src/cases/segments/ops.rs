//! Ops over segmented operands: those the validating front can cut match the host reference, and
//! those it cannot cut are refused by name before anything runs.

use tensormem::ops::{DType, Op, samples};
use tensormem::{Error, Tensor};

use super::{R, limited, segmented};
use crate::cases::Rng;
use crate::{Ctx, check, fail};

/// Every op the front can cut, over operands shaped along its split axis and held in segments
/// (the largest in two or more), with bindings limited below a segment too, matches the host.
pub(super) async fn ops_match_host(ctx: &Ctx) -> R {
    let mut rng = Rng::new(29);
    for op in samples::segment_instances() {
        let shapes = op
            .split_shapes()
            .ok_or_else(|| format!("{op:?} has no split axis"))?;
        let sig = op.signature().map_err(fail("signature"))?;
        let operands: Vec<_> = sig.operands().collect();
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
pub(super) async fn refused(ctx: &Ctx) -> R {
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
    let matmul = Op::matmul((1, 4, 32, 64), false, false, true, false, 1.0);
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
