//! Allocation behaviour: round trips, alignment, budgets and OOM, deferred reuse, handle misuse,
//! bad sizes, concurrency, zero-on-reuse.

mod budget;
mod faults;
mod reuse;

use tensormem::{
    ArenaConfig, ArenaPool, DType, DevicePool, Element, Error, HostAccess, MemoryKind, Runtime,
    Tensor,
};

use super::{Rng, on_threads, runtime};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("round_trip_sizes", round_trip_sizes),
        case!("round_trip_dtypes", round_trip_dtypes),
        case!("alignment", alignment),
        case!("budget_and_oom", budget::budget_and_oom),
        case!("deferred_reuse", reuse::deferred_reuse),
        case!(
            "double_free_and_use_after_free",
            faults::double_free_and_uaf
        ),
        case!("zero_and_oversize", faults::zero_and_oversize),
        case!("concurrent_8_threads", concurrent_8_threads, native_only: "threads: a browser page has one thread here"),
        case!("zero_on_reuse", reuse::zero_on_reuse),
        case!("host_visible_pools", host_visible_pools),
        case!("guard_margins_catch_overruns", faults::guard_margins, native_only: "guard margins are checked with blocking waits (refused on wasm32)"),
        case!("trim_returns_blocks", budget::trim_returns_blocks),
    ]
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

async fn round_trip_sizes(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let max = ctx.backend.capabilities().max_block_size;
    for (i, &size) in [
        1usize,
        2,
        3,
        4,
        5,
        7,
        8,
        63,
        255,
        256,
        4097,
        (1 << 20) + 3,
        16 << 20,
        64 << 20,
    ]
    .iter()
    .enumerate()
    {
        if size as u64 > max {
            continue;
        }
        let data = pattern(size, i as u64 + 1);
        let t = ctx
            .tensor_from(&rt, DType::U8, &[size], &data, "round trip")
            .await
            .map_err(fail(&format!("upload {size} B")))?;
        let back: Vec<u8> = ctx
            .download(&rt, &t)
            .await
            .map_err(fail(&format!("download {size} B")))?;
        check(back == data, || {
            format!("round trip of {size} bytes differs")
        })?;
        rt.free(t).map_err(fail("free"))?;
    }
    rt.device_pool().check_invariants()
}

/// Uploads `data` as a `dtype` tensor of `shape` (labelled `what`) and checks that it downloads
/// unchanged; the tensor stays allocated.
async fn round_trip<T: Element + PartialEq>(
    ctx: &Ctx,
    rt: &Runtime,
    dtype: DType,
    shape: &[usize],
    data: &[T],
    what: &str,
) -> Result<Tensor, String> {
    let t = ctx
        .tensor_from(rt, dtype, shape, data, what)
        .await
        .map_err(fail(what))?;
    check(
        ctx.download::<T>(rt, &t).await.map_err(fail(what))? == data,
        || format!("{what} differs"),
    )?;
    Ok(t)
}

async fn round_trip_dtypes(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let n = 1001;
    let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 100.0).collect();
    let t = round_trip(ctx, &rt, DType::F32, &[7, 143], &f, "f32").await?;
    rt.free(t).map_err(fail("free"))?;
    let d: Vec<f64> = (0..n).map(|i| i as f64 * -1.5e300 / n as f64).collect();
    let t = round_trip(ctx, &rt, DType::F64, &[n], &d, "f64").await?;
    rt.free(t).map_err(fail("free"))?;
    let i: Vec<i32> = (0..n as i32).map(|x| x * -7919).collect();
    let t = round_trip(ctx, &rt, DType::I32, &[n], &i, "i32").await?;
    rt.free(t).map_err(fail("free"))?;
    let u: Vec<u32> = (0..n as u32).map(|x| x.wrapping_mul(2654435761)).collect();
    let t = round_trip(ctx, &rt, DType::U32, &[n], &u, "u32").await?;
    rt.free(t).map_err(fail("free"))?;
    let l: Vec<i64> = (0..n as i64)
        .map(|x| x.wrapping_mul(i64::MAX / 2000) - x)
        .collect();
    let t = round_trip(ctx, &rt, DType::I64, &[n], &l, "i64").await?;
    rt.free(t).map_err(fail("free"))?;
    let h: Vec<u16> = (0..n as u16).map(|x| x.wrapping_mul(40503)).collect();
    let t = round_trip(ctx, &rt, DType::U16, &[n], &h, "u16").await?;
    // A size mismatch is an error, not a truncation.
    let short = ctx.upload(&rt, &t, &h[..10]).await;
    rt.free(t).map_err(fail("free"))?;
    check(matches!(short, Err(Error::SizeMismatch { .. })), || {
        "short upload accepted".into()
    })
}

async fn alignment(ctx: &Ctx) -> R {
    let pool = ArenaPool::new(ctx.backend.clone(), ArenaConfig::device()).map_err(fail("pool"))?;
    let mut live = Vec::new();
    let mut align = 1u64;
    while align <= 64 << 10 {
        for size in [1u64, 3, 100, 70_000] {
            let a = pool
                .allocate(size, align, "aligned")
                .map_err(fail("allocate"))?;
            check(a.range.offset % align == 0, || {
                format!("offset {} not aligned to {align}", a.range.offset)
            })?;
            check(
                a.range.offset % ctx.backend.capabilities().binding_align == 0,
                || "device allocation not aligned for binding".into(),
            )?;
            live.push(a);
        }
        align *= 2;
    }
    for bad in [0u64, 3, 48, 1 << 31] {
        check(
            matches!(
                pool.allocate(64, bad, "bad"),
                Err(Error::InvalidAlignment { .. })
            ),
            || format!("alignment {bad} accepted"),
        )?;
    }
    for a in live {
        pool.free(a.handle).map_err(fail("free"))?;
    }
    pool.check_invariants()
}

async fn concurrent_8_threads(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    on_threads(8, |tid| {
        let (rt, tid) = (rt.clone(), u64::from(tid));
        // Each thread drives its own awaits in async mode.
        pollster::block_on(async move {
            let mut rng = Rng::new(tid + 100);
            let mut live = Vec::new();
            for i in 0..300 {
                if live.len() > 8 || (rng.below(3) == 0 && !live.is_empty()) {
                    let (t, data): (tensormem::Tensor, Vec<u8>) =
                        live.swap_remove(rng.below(live.len() as u64) as usize);
                    if i % 16 == 0 {
                        let back: Vec<u8> =
                            ctx.download(&rt, &t).await.map_err(fail("download"))?;
                        check(back == data, || format!("thread {tid}: data clobbered"))?;
                    }
                    rt.free(t).map_err(fail("free"))?;
                } else {
                    let n = 1 + rng.below(64 << 10) as usize;
                    let data = pattern(n, tid * 1000 + i);
                    let t = ctx
                        .tensor_from(&rt, DType::U8, &[n], &data, "thread")
                        .await
                        .map_err(fail("alloc"))?;
                    live.push((t, data));
                }
            }
            for (t, data) in live {
                let back: Vec<u8> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
                check(back == data, || {
                    format!("thread {tid}: data clobbered at the end")
                })?;
                rt.free(t).map_err(fail("free"))?;
            }
            Ok(())
        })
    })?;
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    check(rt.device_pool().stats().allocations == 0, || {
        "allocations left".into()
    })?;
    rt.device_pool().check_invariants()
}

/// The host-visible (pinned) pools: an `Upload` allocation written by the host and copied to a
/// device tensor, then copied into a `Readback` allocation and read by the host.
async fn host_visible_pools(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let upload = ArenaPool::new(
        ctx.backend.clone(),
        ArenaConfig::host_visible(MemoryKind::Upload),
    )
    .map_err(fail("upload pool"))?;
    let readback = ArenaPool::new(
        ctx.backend.clone(),
        ArenaConfig::host_visible(MemoryKind::Readback),
    )
    .map_err(fail("readback pool"))?;
    let n = 10_000usize;
    let data = pattern(n, 77);
    let src = upload
        .allocate(n as u64, 1, "pinned src")
        .map_err(fail("allocate"))?;
    ctx.host_access(src.range.block, HostAccess::Write)
        .await
        .map_err(fail("host access"))?;
    ctx.backend
        .write_mapped(src.range.block, src.range.offset, &data)
        .map_err(fail("write_mapped"))?;
    let t = rt
        .alloc(DType::U8, &[n], "device")
        .map_err(fail("device"))?;
    let dev = t.allocation().range;
    let ticket = ctx.backend.copy(src.range, dev).map_err(fail("copy in"))?;
    upload
        .free_after(src.handle, ticket)
        .map_err(fail("free"))?;
    let dst = readback
        .allocate(n as u64, 1, "pinned dst")
        .map_err(fail("allocate"))?;
    let ticket = ctx.backend.copy(dev, dst.range).map_err(fail("copy out"))?;
    ctx.wait(ticket).await.map_err(fail("wait"))?;
    let mut back = vec![0u8; n];
    ctx.host_access(dst.range.block, HostAccess::Read)
        .await
        .map_err(fail("host access"))?;
    ctx.backend
        .read_mapped(dst.range.block, dst.range.offset, &mut back)
        .map_err(fail("read_mapped"))?;
    check(back == data, || "pinned round trip differs".into())?;
    readback.free(dst.handle).map_err(fail("free"))?;
    rt.device_pool()
        .mark_used(t.allocation().handle, ticket)
        .map_err(fail("mark"))?;
    rt.free(t).map_err(fail("free"))?;
    upload.check_invariants()?;
    readback.check_invariants()
}
