//! Tensors larger than the device's largest block, held in segments across blocks (issue 13):
//! round trips, every op the validating front can cut against the host reference, ops it cannot
//! cut refused by name, free and reuse, and the budget. Each case lowers the block and binding
//! limits through [`RuntimeConfig::limits`] to a few KiB, so WebGPU's 256 MiB / 128 MiB paths run
//! on every target with small tensors.

mod model;
mod ops;

use tensormem::ops::{DType, Op};
use tensormem::{DeviceLimits, Error, PoolConfig, Runtime, RuntimeConfig, Tensor};

use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("segmented_round_trip", round_trip),
        case!("segmented_ops_match_host_reference", ops::ops_match_host),
        case!(
            "segmented_operand_an_op_cannot_cut_is_refused",
            ops::refused
        ),
        case!("segmented_free_reuse_and_budget", free_reuse_budget),
        case!("segmented_model_weight_and_activations", model::model),
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
