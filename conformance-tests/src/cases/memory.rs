//! Allocation behaviour: round trips, alignment, budgets and OOM, deferred reuse, handle misuse,
//! bad sizes, concurrency, zero-on-reuse.

use std::sync::Arc;

use tensormem::{
    ArenaConfig, ArenaPool, Backend, DType, DevicePool, Error, HostAccess, MemoryKind, PoolConfig,
    Runtime, RuntimeConfig, Ticket,
};

use super::Rng;
use crate::{Case, Ctx, case, check, fail};

type R = std::result::Result<(), String>;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("round_trip_sizes", round_trip_sizes),
        case!("round_trip_dtypes", round_trip_dtypes),
        case!("alignment", alignment),
        case!("budget_and_oom", budget_and_oom),
        case!("deferred_reuse", deferred_reuse),
        case!("double_free_and_use_after_free", double_free_and_uaf),
        case!("zero_and_oversize", zero_and_oversize),
        case!("concurrent_8_threads", concurrent_8_threads, native_only: "threads: a browser page has one thread here"),
        case!("zero_on_reuse", zero_on_reuse),
        case!("host_visible_pools", host_visible_pools),
        case!("guard_margins_catch_overruns", guard_margins, native_only: "guard margins are checked with blocking waits (refused on wasm32)"),
        case!("trim_returns_blocks", trim_returns_blocks),
    ]
}

fn runtime(ctx: &Ctx) -> Result<Runtime, String> {
    ctx.runtime(RuntimeConfig::default())
        .map_err(fail("runtime"))
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

async fn round_trip_dtypes(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let n = 1001;
    let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 100.0).collect();
    let t = ctx
        .tensor_from(&rt, DType::F32, &[7, 143], &f, "f32")
        .await
        .map_err(fail("f32"))?;
    check(
        ctx.download::<f32>(&rt, &t).await.map_err(fail("f32"))? == f,
        || "f32 differs".into(),
    )?;
    let d: Vec<f64> = (0..n).map(|i| i as f64 * -1.5e300 / n as f64).collect();
    let t = ctx
        .tensor_from(&rt, DType::F64, &[n], &d, "f64")
        .await
        .map_err(fail("f64"))?;
    check(
        ctx.download::<f64>(&rt, &t).await.map_err(fail("f64"))? == d,
        || "f64 differs".into(),
    )?;
    let i: Vec<i32> = (0..n as i32).map(|x| x * -7919).collect();
    let t = ctx
        .tensor_from(&rt, DType::I32, &[n], &i, "i32")
        .await
        .map_err(fail("i32"))?;
    check(
        ctx.download::<i32>(&rt, &t).await.map_err(fail("i32"))? == i,
        || "i32 differs".into(),
    )?;
    let u: Vec<u32> = (0..n as u32).map(|x| x.wrapping_mul(2654435761)).collect();
    let t = ctx
        .tensor_from(&rt, DType::U32, &[n], &u, "u32")
        .await
        .map_err(fail("u32"))?;
    check(
        ctx.download::<u32>(&rt, &t).await.map_err(fail("u32"))? == u,
        || "u32 differs".into(),
    )?;
    let l: Vec<i64> = (0..n as i64)
        .map(|x| x.wrapping_mul(i64::MAX / 2000) - x)
        .collect();
    let t = ctx
        .tensor_from(&rt, DType::I64, &[n], &l, "i64")
        .await
        .map_err(fail("i64"))?;
    check(
        ctx.download::<i64>(&rt, &t).await.map_err(fail("i64"))? == l,
        || "i64 differs".into(),
    )?;
    let h: Vec<u16> = (0..n as u16).map(|x| x.wrapping_mul(40503)).collect();
    let t = ctx
        .tensor_from(&rt, DType::U16, &[n], &h, "u16")
        .await
        .map_err(fail("u16"))?;
    check(
        ctx.download::<u16>(&rt, &t).await.map_err(fail("u16"))? == h,
        || "u16 differs".into(),
    )?;
    // A size mismatch is an error, not a truncation.
    check(
        matches!(
            ctx.upload(&rt, &t, &h[..10]).await,
            Err(Error::SizeMismatch { .. })
        ),
        || "short upload accepted".into(),
    )
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

async fn budget_and_oom(ctx: &Ctx) -> R {
    let budget = 4u64 << 20;
    let pool = ArenaPool::new(
        ctx.backend.clone(),
        ArenaConfig {
            block_size: 1 << 20,
            budget: Some(budget),
            ..ArenaConfig::device()
        },
    )
    .map_err(fail("pool"))?;
    let mut live = Vec::new();
    let err = loop {
        match pool.allocate(300 << 10, 1, "filler") {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
        if live.len() > 100 {
            return Err("budget never enforced".into());
        }
    };
    let Error::OutOfMemory(report) = &err else {
        return Err(format!("expected OutOfMemory, got {err}"));
    };
    check(err.is_retryable(), || "OOM must be retryable".into())?;
    check(
        report.budget == Some(budget) && report.reserved <= budget,
        || format!("report budget/reserved wrong: {report:?}"),
    )?;
    check(report.requested == 300 << 10 && report.in_use > 0, || {
        format!("{report:?}")
    })?;
    check(!report.largest_live.is_empty(), || {
        "no live list in the OOM report".into()
    })?;
    let msg = err.to_string();
    check(msg.contains("What you can do"), || {
        format!("OOM message gives no advice: {msg}")
    })?;
    check(pool.stats().reserved <= budget, || {
        "reserved above budget".into()
    })?;
    // Beyond the budget: hopeless, a different error.
    check(
        matches!(
            pool.allocate(budget + 1, 1, "huge"),
            Err(Error::TooLarge { .. })
        ),
        || "over-budget request not TooLarge".into(),
    )?;
    // The pool keeps working after an OOM.
    let a = live.pop().ok_or("nothing allocated")?;
    pool.free(a.handle).map_err(fail("free"))?;
    let again = pool
        .allocate(300 << 10, 1, "after oom")
        .map_err(fail("allocate after OOM"))?;
    live.push(again);
    for a in live {
        pool.free(a.handle).map_err(fail("free"))?;
    }
    pool.check_invariants()?;
    // A runtime with a budget keeps working after an OOM too.
    let rt = ctx
        .runtime(RuntimeConfig {
            device: PoolConfig {
                block_size: 1 << 20,
                budget: Some(2 << 20),
                ..PoolConfig::device()
            },
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
    let t1 = ctx
        .tensor_from(&rt, DType::U8, &[1 << 20], &pattern(1 << 20, 5), "t1")
        .await
        .map_err(fail("t1"))?;
    let t2 = rt
        .alloc(DType::U8, &[(1 << 20) - 4096], "t2")
        .map_err(fail("t2"))?;
    check(
        matches!(
            rt.alloc(DType::U8, &[1 << 20], "t3"),
            Err(Error::OutOfMemory(_))
        ),
        || "third MiB fitted a 2 MiB budget".into(),
    )?;
    check(
        ctx.download::<u8>(&rt, &t1)
            .await
            .map_err(fail("t1 back"))?
            == pattern(1 << 20, 5),
        || "data damaged by the OOM".into(),
    )?;
    rt.free(t2).map_err(fail("free"))?;
    let t3 = rt
        .alloc(DType::U8, &[1 << 19], "t3")
        .map_err(fail("t3 after OOM"))?;
    rt.free(t3).map_err(fail("free"))?;
    rt.free(t1).map_err(fail("free"))
}

/// Enqueues enough device work that it is very likely still in flight when we look.
fn busy_work(backend: &Arc<dyn Backend>, pool: &ArenaPool) -> Result<Ticket, String> {
    let size = 8u64 << 20;
    let a = pool.allocate(size, 1, "busy src").map_err(fail("busy"))?;
    let b = pool.allocate(size, 1, "busy dst").map_err(fail("busy"))?;
    let mut t = Ticket::DONE;
    for _ in 0..8 {
        t = backend.copy(a.range, b.range).map_err(fail("copy"))?;
    }
    pool.free_after(a.handle, t).map_err(fail("free"))?;
    pool.free_after(b.handle, t).map_err(fail("free"))?;
    Ok(t)
}

async fn deferred_reuse(ctx: &Ctx) -> R {
    let backend = &ctx.backend;
    let pool = ArenaPool::new(
        backend.clone(),
        ArenaConfig {
            block_size: 64 << 20,
            ..ArenaConfig::device()
        },
    )
    .map_err(fail("pool"))?;
    let size = 1u64 << 20;
    let mut in_flight_seen = false;
    for round in 0..20 {
        let a = pool.allocate(size, 1, "victim").map_err(fail("allocate"))?;
        let t = busy_work(backend, &pool)?;
        pool.mark_used(a.handle, t).map_err(fail("mark_used"))?;
        let freed = a.range;
        pool.free(a.handle).map_err(fail("free"))?;
        if backend.completed().map_err(fail("completed"))? < t {
            in_flight_seen = true;
            check(pool.stats().pending_free >= size, || {
                "free not deferred".into()
            })?;
        }
        // The pool may hand out other memory, or wait for the ticket and reuse these bytes
        // (past its allowance it waits rather than grow): never reuse them before it completes.
        let b = pool.allocate(size, 1, "next").map_err(fail("allocate"))?;
        let overlaps = b.range.block == freed.block
            && b.range.offset < freed.offset + freed.size
            && freed.offset < b.range.offset + b.range.size;
        let done = backend.completed().map_err(fail("completed"))?;
        check(!overlaps || done >= t, || {
            format!(
                "round {round}: memory handed out again before ticket {} completed",
                t.0
            )
        })?;
        pool.free(b.handle).map_err(fail("free"))?;
        ctx.wait(t).await.map_err(fail("wait"))?;
        pool.reclaim().map_err(fail("reclaim"))?;
        check(pool.stats().pending_free == 0, || {
            "deferred free not reclaimed after completion".into()
        })?;
        pool.check_invariants()?;
        if in_flight_seen && round > 2 {
            break;
        }
    }
    // The host target runs its queue on a worker thread; a backend whose copies all finish before
    // `copy` returns cannot show the deferral, which would be a contract violation for batching
    // backends and suspicious for any real device.
    check(in_flight_seen, || {
        "work never observed in flight: tickets complete synchronously".into()
    })
}

async fn double_free_and_uaf(ctx: &Ctx) -> R {
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

async fn zero_and_oversize(ctx: &Ctx) -> R {
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

async fn concurrent_8_threads(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let results: Vec<R> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u64)
            .map(|tid| {
                let rt = rt.clone();
                // Each thread drives its own awaits in async mode.
                s.spawn(move || -> R {
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
                                    check(back == data, || {
                                        format!("thread {tid}: data clobbered")
                                    })?;
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
                            let back: Vec<u8> =
                                ctx.download(&rt, &t).await.map_err(fail("download"))?;
                            check(back == data, || {
                                format!("thread {tid}: data clobbered at the end")
                            })?;
                            rt.free(t).map_err(fail("free"))?;
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    for r in results {
        r?;
    }
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    check(rt.device_pool().stats().allocations == 0, || {
        "allocations left".into()
    })?;
    rt.device_pool().check_invariants()
}

async fn zero_on_reuse(ctx: &Ctx) -> R {
    let rt = ctx
        .runtime(RuntimeConfig {
            device: PoolConfig {
                zero_on_reuse: true,
                block_size: 1 << 20,
                ..PoolConfig::device()
            },
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
    for size in [4usize, 1000, 64 << 10] {
        let dirty = ctx
            .tensor_from(&rt, DType::U8, &[size], &vec![0xA5u8; size], "dirty")
            .await
            .map_err(fail("dirty"))?;
        let range = dirty.allocation().range;
        rt.free(dirty).map_err(fail("free"))?;
        ctx.synchronize(&rt).await.map_err(fail("sync"))?;
        let fresh = rt
            .alloc(DType::U8, &[size], "fresh")
            .map_err(fail("fresh"))?;
        check(fresh.allocation().range.offset == range.offset, || {
            "test setup: the freed range was not reused".into()
        })?;
        let back: Vec<u8> = ctx.download(&rt, &fresh).await.map_err(fail("download"))?;
        check(back.iter().all(|&b| b == 0), || {
            format!("{size} B: reused memory not zeroed")
        })?;
        rt.free(fresh).map_err(fail("free"))?;
    }
    Ok(())
}

async fn trim_returns_blocks(ctx: &Ctx) -> R {
    // The block path on every backend (the arena that grows in place has its own case).
    let pool = ArenaPool::new(
        ctx.backend.clone(),
        ArenaConfig {
            block_size: 1 << 20,
            in_place: false,
            ..ArenaConfig::device()
        },
    )
    .map_err(fail("pool"))?;
    let small = pool.allocate(1000, 1, "small").map_err(fail("small"))?;
    let big = pool
        .allocate(3 << 20, 1, "dedicated")
        .map_err(fail("big"))?;
    check(pool.stats().blocks == 2, || {
        format!("expected 2 blocks, {:?}", pool.stats())
    })?;
    pool.free(big.handle).map_err(fail("free"))?;
    let released = pool.trim().map_err(fail("trim"))?;
    check(released >= 3 << 20, || format!("trim released {released}"))?;
    check(pool.stats().blocks == 1, || {
        "trim released a block in use".into()
    })?;
    pool.free(small.handle).map_err(fail("free"))?;
    pool.trim().map_err(fail("trim"))?;
    check(pool.stats().reserved == 0, || {
        "empty pool still reserves".into()
    })?;
    pool.check_invariants()
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

/// Guard margins: an op whose output binding runs 16 bytes past its tensor is reported on free,
/// naming the tensor; clean allocations free without error.
async fn guard_margins(ctx: &Ctx) -> R {
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
