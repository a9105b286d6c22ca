//! Budgets and block return: out of memory at the budget with the numbers in the report, and
//! trim giving idle blocks back.

use tensormem::{ArenaConfig, ArenaPool, DType, DevicePool, Error, PoolConfig, RuntimeConfig};

use super::{R, pattern};
use crate::{Ctx, check, fail};

pub(super) async fn budget_and_oom(ctx: &Ctx) -> R {
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

pub(super) async fn trim_returns_blocks(ctx: &Ctx) -> R {
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
