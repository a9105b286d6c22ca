//! Every op on the target against the host reference, with the instances, inputs and comparison
//! rule of `tensormem::ops::samples`.

use std::sync::Arc;
use tensormem::ops::{Op, samples};

use tensormem::{Error, Runtime, RuntimeConfig, Tensor};

use super::{Rng, runtime};
use crate::inject::Faulty;
use crate::{Case, CaseResult as R, Ctx, case, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("ops_match_host_reference", ops_match_host),
        case!("ops_split_across_bindings", ops_split_across_bindings),
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
