//! Every op on the target against the host reference, with the instances, inputs and comparison
//! rule of `tensormem::ops::samples`.

use std::sync::Arc;
use tensormem::ops::quant::MAX_DYNAMIC_GROUP;
use tensormem::ops::{Op, WeightFormat, samples};

use tensormem::{ArgumentError, Error, Runtime, RuntimeConfig, Tensor};

use super::{Rng, runtime};
use crate::inject::Faulty;
use crate::{Case, CaseResult as R, Ctx, case, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("ops_match_host_reference", ops_match_host),
        case!("ops_split_across_bindings", ops_split_across_bindings),
        case!("int8_dynamic_refusals", int8_dynamic_refusals),
    ]
}

/// Runs `op` on the target through runtime tensors bound with [`Runtime::dispatch`] (each of
/// its operand's dtype, uses recorded by the runtime) and returns the output bytes.
pub async fn run_on_target(
    ctx: &Ctx,
    rt: &Runtime,
    op: &Op,
    inputs: &[Vec<u8>],
) -> Result<Vec<u8>, String> {
    let sig = op.signature().map_err(fail("signature"))?;
    let mut tensors = Vec::new();
    for (data, o) in inputs.iter().zip(&sig.inputs) {
        // The tensor holds the elements; its binding adds the padding to a whole word.
        let bytes = (o.len * o.dtype.size()) as usize;
        let data = data
            .get(..bytes)
            .ok_or_else(|| format!("{} input too short", op.name()))?;
        tensors.push(
            ctx.tensor_from(rt, o.dtype, &[o.len as usize], data, "op input")
                .await
                .map_err(fail(&format!("{} input {:?}", op.name(), o)))?,
        );
    }
    let out = sig.outputs[0];
    // An op that updates its output starts from the bytes the reference starts from.
    let output = match samples::initial_output(op) {
        Some(init) => ctx
            .tensor_from(rt, out.dtype, &[out.len as usize], &init, "op output")
            .await
            .map_err(fail("output"))?,
        None => rt
            .alloc(out.dtype, &[out.len as usize], "op output")
            .map_err(fail("output"))?,
    };
    let inputs: Vec<&Tensor> = tensors.iter().collect();
    rt.dispatch(op, &inputs, &[&output])
        .map_err(fail(&format!("dispatch {op:?}")))?;
    let result = ctx
        .download::<u8>(rt, &output)
        .await
        .map_err(fail("download"))?;
    for t in tensors.into_iter().chain([output]) {
        rt.free(t).map_err(fail("free"))?;
    }
    Ok(result)
}

async fn ops_match_host(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let mut rng = Rng::new(7);
    for op in samples::instances() {
        let inputs = samples::inputs(&op, &mut rng).map_err(fail("inputs"))?;
        let want = samples::reference(&op, &inputs).map_err(fail("host reference"))?;
        let got = run_on_target(ctx, &rt, &op, &inputs).await?;
        samples::check(&op, &got, &want).map_err(|e| format!("{op:?}: {e}"))?;
    }
    Ok(())
}

/// An int8-dynamic conv2d (it would quantise no activations) and an int8-dynamic matmul whose
/// scale group exceeds `MAX_DYNAMIC_GROUP` (its integer sums could overflow 32 bits) are refused
/// with their typed argument errors on every target, at dispatch and before anything runs: the
/// output keeps its bytes. The same ops with a format the target runs are accepted.
async fn int8_dynamic_refusals(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    // A sample convolution, its weight stored as int8 (which it runs) or int8-dynamic (refused).
    let conv = samples::instances()
        .into_iter()
        .find(|op| matches!(op, Op::Conv2d { .. }))
        .ok_or("no conv2d among the op samples")?
        .with_weight_format(WeightFormat::Int8 { group: 0 });
    let longest = u32::try_from(MAX_DYNAMIC_GROUP).map_err(|e| format!("group bound: {e}"))?;
    let dynamic = |group| WeightFormat::Int8Dynamic { group };
    let matmul = Op::batched_matmul(1, 1, 2, longest + 1);
    let cases = [
        (conv.clone(), conv.with_weight_format(dynamic(0)), "conv2d"),
        (
            matmul.with_weight_format(dynamic(longest)),
            matmul.with_weight_format(dynamic(0)),
            "long group",
        ),
    ];
    let mut rng = Rng::new(3);
    for (accepted, refused, what) in cases {
        let sig = accepted.signature().map_err(fail(what))?;
        let mut inputs = Vec::new();
        for o in &sig.inputs {
            let bytes: Vec<u8> = (0..o.len * o.dtype.size())
                .map(|_| rng.next_u64() as u8)
                .collect();
            let t = ctx
                .tensor_from(&rt, o.dtype, &[o.len as usize], &bytes, "input")
                .await
                .map_err(fail(what))?;
            inputs.push(t);
        }
        let out = sig.outputs[0];
        let before = vec![0x5au8; (out.len * out.dtype.size()) as usize];
        let output = ctx
            .tensor_from(&rt, out.dtype, &[out.len as usize], &before, "output")
            .await
            .map_err(fail(what))?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        match rt.dispatch(&refused, &refs, &[&output]) {
            Err(Error::Argument(ArgumentError::Invalid { .. })) if what == "conv2d" => {}
            Err(Error::Argument(ArgumentError::TooMany { .. })) if what == "long group" => {}
            other => return Err(format!("{what}: {refused:?} gave {other:?}")),
        }
        let after = ctx.download::<u8>(&rt, &output).await.map_err(fail(what))?;
        if after != before {
            return Err(format!("{what}: a refused dispatch changed the output"));
        }
        rt.dispatch(&accepted, &refs, &[&output])
            .map_err(fail(&format!("{what}: the accepted format")))?;
        ctx.download::<u8>(&rt, &output).await.map_err(fail(what))?;
        for t in inputs.into_iter().chain([output]) {
            rt.free(t).map_err(fail("free"))?;
        }
    }
    Ok(())
}

/// Ops whose operands exceed the largest binding (WebGPU's 128 MiB, scaled down to a few KiB by
/// the wrapper) run as the validating front's parts and still match the host reference; an op
/// the front cannot split is refused as too large, before anything reaches the device.
async fn ops_split_across_bindings(ctx: &Ctx) -> R {
    let mut rng = Rng::new(13);
    for (op, limit) in samples::split_instances() {
        let small = Arc::new(Faulty::with_binding_limit(ctx.backend.clone(), limit));
        let rt = Runtime::new(small, RuntimeConfig::default()).map_err(fail("runtime"))?;
        let inputs = samples::inputs(&op, &mut rng).map_err(fail("inputs"))?;
        let want = samples::reference(&op, &inputs).map_err(fail("host reference"))?;
        let got = run_on_target(ctx, &rt, &op, &inputs).await?;
        samples::check(&op, &got, &want).map_err(|e| format!("{op:?} split at {limit}: {e}"))?;
    }
    let permute = Op::Permute {
        dims: [4, 8, 16, 8],
        perm: [1, 0, 2, 3],
    };
    let small = Arc::new(Faulty::with_binding_limit(ctx.backend.clone(), 1 << 10));
    let rt = Runtime::new(small, RuntimeConfig::default()).map_err(fail("runtime"))?;
    let x = rt
        .alloc(tensormem::DType::F32, &[4 * 8 * 16 * 8], "x")
        .map_err(fail("alloc"))?;
    let y = rt
        .alloc(tensormem::DType::F32, &[4 * 8 * 16 * 8], "y")
        .map_err(fail("alloc"))?;
    let refused = rt.dispatch(&permute, &[&x], &[&y]);
    rt.free(x).map_err(fail("free"))?;
    rt.free(y).map_err(fail("free"))?;
    match refused {
        Err(Error::TooLarge { limit: 1024, .. }) => Ok(()),
        other => Err(format!(
            "an unsplittable op over the binding limit: {other:?}"
        )),
    }
}
