//! Reuse of freed memory: deferred until the device work that used it completes, and zeroed
//! before reuse when asked.

use std::sync::Arc;

use tensormem::{
    ArenaConfig, ArenaPool, Backend, DType, DevicePool, PoolConfig, RuntimeConfig, Ticket,
};

use super::R;
use crate::{Ctx, check, fail};

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

pub(super) async fn deferred_reuse(ctx: &Ctx) -> R {
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

pub(super) async fn zero_on_reuse(ctx: &Ctx) -> R {
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
