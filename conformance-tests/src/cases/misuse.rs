//! Misuse, tried as a new user would: the binding rules (oversize, undersize, overlapping
//! outputs, misaligned offsets) and the regressions of issue 12's defects 2, 3, 4, 8 and 9. Every
//! target must give the same typed error for the same misuse: the validating front decides, not
//! the backend.

use tensormem::ops::samples;
use tensormem::{BlockRange, DType, Error, Graph, Op, PoolConfig, Runtime, RuntimeConfig, Tensor};

use super::runtime;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("binding_sizes_are_exact", binding_sizes_are_exact),
        case!("overlapping_outputs_are_refused", overlapping_outputs),
        case!("tensors_bind_to_kernels", tensors_bind_to_kernels),
        case!(
            "overflowing_op_params_are_errors_not_a_lost_device",
            op_params
        ),
        case!("shape_arithmetic_is_checked", shapes),
        case!("foreign_outputs_and_intermediate_reads", graphs),
        case!("kernel_on_freed_tensor_is_tracked", tracking),
        case!("typed_transfers_and_too_large", dtypes),
    ]
}

/// The tensor's range, `size` bytes long.
fn range(rt: &Runtime, t: &Tensor, size: u64) -> Result<BlockRange, String> {
    let r = rt
        .device_pool()
        .resolve(t.allocation().handle)
        .map_err(fail("resolve"))?;
    Ok(BlockRange { size, ..r })
}

/// Fails unless `got` is an error `want` accepts, naming the misuse.
fn expect<T>(what: &str, got: tensormem::Result<T>, want: impl Fn(&Error) -> bool) -> R {
    match got {
        Err(e) if want(&e) => Ok(()),
        Err(e) => Err(format!("{what}: unexpected error {e:?}")),
        Ok(_) => Err(format!("{what}: accepted")),
    }
}

async fn binding_sizes_are_exact(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let x = ctx
        .tensor_from(&rt, DType::F32, &[64], &[1.0f32; 64], "x")
        .await
        .map_err(fail("x"))?;
    let y = rt.alloc(DType::F32, &[64], "y").map_err(fail("y"))?;
    let op = Op::Relu { len: 16 };
    let out = range(&rt, &y, 64)?;
    // Oversize (a whole 256-byte tensor for a 64-byte operand) and undersize: one error.
    for size in [256, 60] {
        let bindings = [range(&rt, &x, size)?, out];
        expect(
            &format!("binding of {size} bytes for 64"),
            rt.backend().dispatch(&op, &bindings),
            |e| {
                matches!(e, Error::BindingSize { index: 0, operand: "x", expected: 64, actual, .. }
                    if *actual == size)
            },
        )?;
    }
    expect(
        "one binding for relu",
        rt.backend().dispatch(&op, &[out]),
        |e| {
            matches!(
                e,
                Error::BindingCount {
                    expected: 2,
                    actual: 1,
                    ..
                }
            )
        },
    )?;
    let align = ctx.backend.capabilities().binding_align;
    if align > 4 {
        let mut shifted = range(&rt, &x, 64)?;
        shifted.offset += 4;
        expect(
            "binding offset off binding_align",
            rt.backend().dispatch(&op, &[shifted, out]),
            |e| {
                matches!(
                    e,
                    Error::Misaligned {
                        align_name: "binding_align",
                        ..
                    }
                )
            },
        )?;
    }
    // The exact size runs, and nothing was left half-enqueued by the refusals.
    rt.dispatch(&Op::Relu { len: 64 }, &[&x], &[&y])
        .map_err(fail("exact dispatch"))?;
    check(
        ctx.download::<f32>(&rt, &y)
            .await
            .map_err(fail("download"))?
            == vec![1.0; 64],
        || "relu of ones".into(),
    )?;
    rt.free(x).map_err(fail("free"))?;
    rt.free(y).map_err(fail("free"))
}

async fn overlapping_outputs(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let n = 1024;
    let a = ctx
        .tensor_from(&rt, DType::F32, &[2 * n], &vec![2.0f32; 2 * n], "a")
        .await
        .map_err(fail("a"))?;
    let ra = range(&rt, &a, 4 * n as u64)?;
    let add = Op::Add {
        len: n as u32,
        b_len: n as u32,
    };
    // The output is an input (in place), or overlaps one by all but one binding-aligned step.
    let mut shifted = ra;
    shifted.offset += ctx.backend.capabilities().binding_align.max(4);
    for (what, out) in [("in place", ra), ("shifted", shifted)] {
        expect(
            &format!("output overlapping an input ({what})"),
            rt.backend().dispatch(&add, &[ra, ra, out]),
            |e| matches!(e, Error::Overlap { .. }),
        )?;
    }
    expect(
        "tensor bound as input and output",
        rt.dispatch(&Op::Relu { len: 2 * n as u32 }, &[&a], &[&a]),
        |e| matches!(e, Error::Overlap { .. }),
    )?;
    // Inputs may alias: both operands of the add are the first half of `a`.
    let c = rt.alloc(DType::F32, &[n], "c").map_err(fail("c"))?;
    let rc = range(&rt, &c, 4 * n as u64)?;
    rt.backend()
        .dispatch(&add, &[ra, ra, rc])
        .map_err(fail("aliased inputs"))?;
    check(
        ctx.download::<f32>(&rt, &c)
            .await
            .map_err(fail("download"))?
            == vec![4.0; n],
        || "a + a".into(),
    )?;
    rt.free(a).map_err(fail("free"))?;
    rt.free(c).map_err(fail("free"))
}

async fn tensors_bind_to_kernels(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let x = ctx
        .tensor_from(
            &rt,
            DType::F32,
            &[8],
            &[-1.0f32, 2.0, -3.0, 4.0, 0.5, -0.5, 8.0, -8.0],
            "x",
        )
        .await
        .map_err(fail("x"))?;
    let y = rt.alloc(DType::F32, &[8], "y").map_err(fail("y"))?;
    let ids = rt.alloc(DType::U32, &[8], "ids").map_err(fail("ids"))?;
    let relu = Op::Relu { len: 8 };
    expect(
        "u32 tensor as relu input",
        rt.dispatch(&relu, &[&ids], &[&y]),
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    expected: DType::F32,
                    actual: DType::U32,
                    ..
                }
            )
        },
    )?;
    let short = rt.alloc(DType::F32, &[4], "short").map_err(fail("short"))?;
    expect(
        "4-element output for 8",
        rt.dispatch(&relu, &[&x], &[&short]),
        |e| matches!(e, Error::BindingSize { operand: "y", .. }),
    )?;
    rt.dispatch(&relu, &[&x], &[&y]).map_err(fail("relu"))?;
    check(
        ctx.download::<f32>(&rt, &y)
            .await
            .map_err(fail("download"))?
            == vec![0.0, 2.0, 0.0, 4.0, 0.5, 0.0, 8.0, 0.0],
        || "relu result".into(),
    )?;
    for t in [x, y, ids, short] {
        rt.free(t).map_err(fail("free"))?;
    }
    Ok(())
}

async fn op_params(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let x = ctx
        .tensor_from(&rt, DType::F32, &[4], &[1.0f32; 4], "x")
        .await
        .map_err(fail("x"))?;
    let y = rt.alloc(DType::F32, &[4], "y").map_err(fail("y"))?;
    let conv = samples::overflowing_conv();
    expect(
        "conv with padding near 2^31",
        rt.dispatch(&conv, &[&x, &x], &[&y]),
        |e| matches!(e, Error::ArithmeticOverflow { .. }),
    )?;
    let permute = Op::Permute {
        dims: [1 << 20, 1 << 20, 1 << 20, 1 << 20],
        perm: [1, 0, 2, 3],
    };
    let bindings = [range(&rt, &x, 16)?, range(&rt, &y, 16)?];
    expect(
        "permute dims past 2^64 (raw ranges)",
        rt.backend().dispatch(&permute, &bindings),
        |e| matches!(e, Error::ArithmeticOverflow { .. }),
    )?;
    // The device is not lost: work still runs and completes.
    rt.dispatch(&Op::Scale { len: 4, alpha: 3.0 }, &[&x], &[&y])
        .map_err(fail("scale after refusals"))?;
    ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
    check(
        ctx.download::<f32>(&rt, &y)
            .await
            .map_err(fail("download"))?
            == vec![3.0; 4],
        || "scale after refusals".into(),
    )?;
    rt.free(x).map_err(fail("free"))?;
    rt.free(y).map_err(fail("free"))
}

/// The shapes overflow u64 bytes with a 32-bit `usize` (wasm32) as well as a 64-bit one (the
/// browser run found that `[usize::MAX, 2]` is merely too large there).
async fn shapes(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    expect(
        "tensor of usize::MAX x usize::MAX x 2 f32",
        rt.alloc(DType::F32, &[usize::MAX, usize::MAX, 2], "huge"),
        |e| matches!(e, Error::ArithmeticOverflow { .. }),
    )?;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[usize::MAX, usize::MAX, 4]);
    expect(
        "graph op on an overflowing shape",
        g.op(Op::Relu { len: 4 }, &[x], &[4], "relu"),
        |e| matches!(e, Error::ArithmeticOverflow { .. }),
    )?;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[usize::MAX / 2 + 1, usize::MAX, 4]);
    g.output(x);
    expect("compile of an overflowing input", rt.compile(&g), |e| {
        matches!(e, Error::ArithmeticOverflow { .. })
    })?;
    rt.device_pool().check_invariants()
}

async fn graphs(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let mut other = Graph::new();
    let mut last = None;
    for i in 0..6 {
        last = Some(other.input(&format!("o{i}"), DType::F32, &[4]));
    }
    let foreign = last.ok_or("no foreign tensor")?;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4]);
    let h = g
        .op(Op::Relu { len: 4 }, &[x], &[4], "h")
        .map_err(fail("h"))?;
    let y = g
        .op(Op::Scale { len: 4, alpha: 2.0 }, &[h], &[4], "y")
        .map_err(fail("y"))?;
    g.output(y);
    let mut bad = g.clone();
    bad.output(foreign);
    expect("compile with a foreign output", rt.compile(&bad), |e| {
        matches!(e, Error::ForeignTensor { .. })
    })?;
    let mut m = rt.compile(&g).map_err(fail("compile"))?;
    ctx.set_input(&mut m, x, bytemuck::cast_slice(&[-1.0f32, 1.0, 2.0, -2.0]))
        .await
        .map_err(fail("input"))?;
    ctx.run(&mut m).await.map_err(fail("run"))?;
    check(
        ctx.read_output::<f32>(&m, y)
            .await
            .map_err(fail("read y"))?
            == vec![0.0, 2.0, 4.0, 0.0],
        || "model output".into(),
    )?;
    expect(
        "read of an intermediate",
        ctx.read_output::<f32>(&m, h).await,
        |e| matches!(e, Error::NotAnOutput { .. }),
    )?;
    expect(
        "read of a foreign tensor",
        ctx.read_output::<f32>(&m, foreign).await,
        |e| matches!(e, Error::ForeignTensor { .. }),
    )
}

async fn tracking(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    for raw in [false, true] {
        let n = 1 << 16;
        let x = ctx
            .tensor_from(&rt, DType::F32, &[n], &vec![1.0f32; n], "x")
            .await
            .map_err(fail("x"))?;
        let y = rt.alloc(DType::F32, &[n], "y").map_err(fail("y"))?;
        let op = Op::Scale {
            len: n as u32,
            alpha: 3.0,
        };
        if raw {
            let bindings = [range(&rt, &x, x.size())?, range(&rt, &y, y.size())?];
            rt.backend()
                .dispatch(&op, &bindings)
                .map_err(fail("raw dispatch"))?;
        } else {
            rt.dispatch(&op, &[&x], &[&y]).map_err(fail("dispatch"))?;
        }
        // Tracked until it completes: either the front still holds the use, or the work is done.
        let queued = range(&rt, &y, y.size())?;
        let tracked =
            rt.front().last_use(&queued).map_err(fail("last use"))? > tensormem::Ticket::DONE;
        let done = {
            let last = rt.backend().flush().map_err(fail("flush"))?;
            rt.backend().completed().map_err(fail("completed"))? >= last
        };
        check(tracked || done, || {
            format!("raw = {raw}: the queued kernel's use of y is not tracked")
        })?;
        rt.free(y).map_err(fail("free y"))?;
        let z = ctx
            .tensor_from(&rt, DType::F32, &[n], &vec![7.0f32; n], "z")
            .await
            .map_err(fail("z"))?;
        ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
        check(
            ctx.download::<f32>(&rt, &z).await.map_err(fail("z back"))? == vec![7.0; n],
            || format!("raw = {raw}: the queued kernel overwrote the tensor reusing its range"),
        )?;
        rt.free(x).map_err(fail("free"))?;
        rt.free(z).map_err(fail("free"))?;
    }
    Ok(())
}

async fn dtypes(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let t = rt.alloc(DType::F32, &[4], "f32").map_err(fail("alloc"))?;
    expect(
        "f64 data into an f32 tensor",
        ctx.upload(&rt, &t, &[1.0f64, 2.0]).await,
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    expected: DType::F32,
                    actual: DType::F64,
                    ..
                }
            )
        },
    )?;
    expect(
        "i32 download of an f32 tensor",
        ctx.download::<i32>(&rt, &t).await,
        |e| matches!(e, Error::DTypeMismatch { .. }),
    )?;
    ctx.upload(&rt, &t, &[0u8; 16])
        .await
        .map_err(fail("raw bytes"))?;
    rt.free(t).map_err(fail("free"))?;
    // Beyond the largest block a tensor is held in segments (the `segmented_*` cases); what no
    // freeing can ever fit is a tensor beyond the device's memory budget: hopeless, TooLarge,
    // whether it would be one block or several.
    let budget = 64u64 << 20;
    let rt = ctx
        .runtime(RuntimeConfig {
            device: PoolConfig {
                budget: Some(budget),
                ..PoolConfig::device()
            },
            ..RuntimeConfig::default()
        })
        .map_err(fail("budgeted runtime"))?;
    let max = ctx.backend.capabilities().max_block_size;
    for size in [budget + 1, max.saturating_add(1), 1 << 40] {
        let Ok(len) = usize::try_from(size) else {
            continue;
        };
        match rt.alloc(DType::U8, &[len], "huge") {
            Err(e @ Error::TooLarge { .. }) if !e.is_retryable() => {}
            other => return Err(format!("{size} bytes: expected TooLarge, got {other:?}")),
        }
    }
    rt.device_pool().check_invariants()?;
    rt.check_leaks().map_err(fail("leaks"))
}
