//! Faults a pool must report: double free and use after free, zero and oversize requests, and
//! overruns into guard margins.

use tensormem::{ArenaConfig, ArenaPool, DType, DevicePool, Error, PoolConfig};

use super::{R, runtime};
use crate::{Ctx, check, fail};

pub(super) async fn double_free_and_uaf(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let pool = rt.device_pool();
    let a = pool.allocate(1000, 1, "a").map_err(fail("allocate"))?;
    pool.free(a.handle).map_err(fail("free"))?;
    check(
        matches!(pool.free(a.handle), Err(Error::DoubleFree { .. })),
        || "double free not detected".into(),
    )?;
    check(
        matches!(pool.resolve(a.handle), Err(Error::StaleHandle { .. })),
        || "use after free not detected".into(),
    )?;
    // The slot is reused; the stale handle still cannot touch the new allocation.
    let b = pool.allocate(1000, 1, "b").map_err(fail("allocate"))?;
    check(
        matches!(
            pool.free(a.handle),
            Err(Error::StaleHandle { .. } | Error::DoubleFree { .. })
        ),
        || "stale free accepted".into(),
    )?;
    check(pool.resolve(b.handle).is_ok(), || {
        "live handle broken by a stale free".into()
    })?;
    // A tensor whose memory was freed through the pool cannot be read or written.
    let t = ctx
        .tensor_from(&rt, DType::F32, &[4], &[1.0f32, 2.0, 3.0, 4.0], "t")
        .await
        .map_err(fail("t"))?;
    pool.free(t.allocation().handle).map_err(fail("free"))?;
    check(
        matches!(
            ctx.download::<f32>(&rt, &t).await,
            Err(Error::StaleHandle { .. })
        ),
        || "download after free not detected".into(),
    )?;
    check(
        matches!(
            ctx.upload(&rt, &t, &[0.0f32; 4]).await,
            Err(Error::StaleHandle { .. })
        ),
        || "upload after free not detected".into(),
    )?;
    check(matches!(rt.free(t), Err(Error::DoubleFree { .. })), || {
        "tensor double free".into()
    })?;
    // A handle from another pool is refused.
    let other = ArenaPool::new(ctx.backend.clone(), ArenaConfig::device()).map_err(fail("pool"))?;
    check(
        matches!(other.free(b.handle), Err(Error::ForeignHandle { .. })),
        || "foreign handle accepted".into(),
    )?;
    pool.free(b.handle).map_err(fail("free"))?;
    pool.check_invariants()
}

pub(super) async fn zero_and_oversize(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let pool = rt.device_pool();
    let max = ctx.backend.capabilities().max_block_size;
    check(
        matches!(pool.allocate(0, 1, "zero"), Err(Error::ZeroSize { .. })),
        || "zero-size allocation accepted".into(),
    )?;
    check(
        matches!(
            pool.allocate(u64::MAX, 1, "max"),
            Err(Error::TooLarge { .. })
        ),
        || "u64::MAX accepted".into(),
    )?;
    check(
        matches!(
            pool.allocate(max + 1, 1, "max+1"),
            Err(Error::TooLarge { .. })
        ),
        || "allocation beyond the largest block accepted".into(),
    )?;
    check(
        matches!(
            rt.alloc(DType::F32, &[0, 5], "empty"),
            Err(Error::ZeroSize { .. })
        ),
        || "empty tensor accepted".into(),
    )?;
    check(
        matches!(
            // Overflows u64 bytes with a 32-bit usize too (wasm32), not only a 64-bit one.
            rt.alloc(DType::F64, &[usize::MAX, usize::MAX, 4], "overflow"),
            Err(Error::ArithmeticOverflow { .. })
        ),
        || "overflowing shape accepted".into(),
    )?;
    check(pool.stats().allocations == 0, || {
        "a failed request left an allocation".into()
    })?;
    pool.check_invariants()
}
/// Guard margins: an op whose output binding runs 16 bytes past its tensor is reported on free,
/// naming the tensor; clean allocations free without error.
pub(super) async fn guard_margins(ctx: &Ctx) -> R {
    let pool = PoolConfig {
        guard_bytes: 64,
        block_size: 1 << 16,
        ..PoolConfig::device()
    }
    .build(ctx.backend.clone())
    .map_err(fail("pool"))?
    .top;
    let src = pool.allocate(4 * 104, 1, "src").map_err(fail("src"))?;
    let dst = pool
        .allocate(4 * 100, 1, "overrun victim")
        .map_err(fail("dst"))?;
    let overrun = tensormem::BlockRange {
        size: 4 * 104,
        ..dst.range
    };
    let t = ctx
        .backend
        .dispatch(&tensormem::Op::Copy { len: 104 }, &[src.range, overrun])
        .map_err(fail("dispatch"))?;
    pool.mark_used(dst.handle, t).map_err(fail("mark"))?;
    match pool.free(dst.handle) {
        Err(Error::Corruption(msg)) => check(msg.contains("overrun victim"), || {
            format!("corruption report does not name the tensor: {msg}")
        })?,
        other => return Err(format!("overrun not caught: {other:?}")),
    }
    pool.free(src.handle).map_err(fail("clean free"))?;
    pool.check_invariants()
}
