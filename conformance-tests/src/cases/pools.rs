//! Pool stack regressions, on every target: partial unaligned writes, a failed allocate that had
//! already carved, free after a failed backend call and after device loss, and pools of one
//! runtime reclaiming from each other (each case named for what it guards). Failures are injected
//! with [`Faulty`] around the target's backend.

use std::sync::Arc;

use tensormem::{
    Backend, DType, DevicePool, Error, PoolConfig, Runtime, RuntimeConfig, StagingConfig,
};

use super::staged_runtime;
use crate::inject::Faulty;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "partial_unaligned_writes_leave_their_neighbours",
            partial_unaligned_writes
        ),
        case!(
            "a_failed_allocate_holds_nothing",
            failed_allocate_holds_nothing
        ),
        case!(
            "a_failed_free_is_retryable_and_nothing_after_loss",
            failed_free_is_retryable
        ),
        case!(
            "one_pressure_path_across_device_pool_and_belt",
            pools_reclaim_from_each_other
        ),
    ]
}

fn faulty(ctx: &Ctx) -> Arc<Faulty> {
    Arc::new(Faulty::new(ctx.backend.clone()))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

/// Writes of 1..=7 bytes (and one of 13) at aligned offsets inside a patterned tensor must change
/// exactly those bytes, on the backend's own path and on the staged path.
async fn partial_unaligned_writes(ctx: &Ctx) -> R {
    let align = ctx.backend.capabilities().copy_align.max(1) as usize;
    for force_staging in [false, true] {
        let rt = staged_runtime(ctx, force_staging)?;
        let base = pattern(96, 7);
        let t = ctx
            .tensor_from(&rt, DType::U8, &[base.len()], &base, "neighbours")
            .await
            .map_err(fail("tensor"))?;
        let mut expect = base.clone();
        for (i, len) in [1usize, 2, 3, 5, 6, 7, 13].into_iter().enumerate() {
            let offset = (i * 12).div_ceil(align) * align;
            let data = vec![0xEE - i as u8; len];
            ctx.write_bytes(&rt, t.allocation(), offset as u64, &data)
                .await
                .map_err(fail("partial write"))?;
            expect[offset..offset + len].copy_from_slice(&data);
            let back: Vec<u8> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
            if let Some(at) = back.iter().zip(&expect).position(|(a, b)| a != b) {
                return Err(format!(
                    "staging {force_staging}: a {len}-byte write at {offset} changed byte {at} \
                     ({:#04x}, expected {:#04x})",
                    back[at], expect[at]
                ));
            }
        }
        // A partial read returns exactly the bytes asked for.
        let mut five = [0u8; 5];
        ctx.read_bytes(&rt, t.allocation(), 0, &mut five)
            .await
            .map_err(fail("partial read"))?;
        check(five[..] == expect[..5], || "partial read differs".into())?;
        rt.free(t).map_err(fail("free"))?;
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}

/// Arms a failure at every backend call an allocate makes, one at a time, on stacks whose
/// allocate has a step after carving (zero-on-reuse, guard margins): every failed allocate must
/// leave the pool as it was, with nothing carved and no block kept.
async fn failed_allocate_holds_nothing(ctx: &Ctx) -> R {
    let stacks = [
        ("zero-on-reuse", true, 0),
        ("guard margins", false, 64),
        ("both", true, 64),
    ];
    for (name, zero_on_reuse, guard_bytes) in stacks {
        if cfg!(target_arch = "wasm32") && guard_bytes > 0 {
            // Guard margins are refused on wasm32 (their checks wait synchronously).
            continue;
        }
        let backend = faulty(ctx);
        let pool = PoolConfig {
            zero_on_reuse,
            guard_bytes,
            block_size: 1 << 16,
            ..PoolConfig::device()
        }
        .build(backend.clone())
        .map_err(fail("pool"))?
        .top;
        // One allocation already live: the failing ones carve next to it in the same block, or
        // grow a new block for a large request.
        let keep = pool.allocate(256, 1, "kept").map_err(fail("kept"))?;
        for size in [300u64, 1 << 17] {
            let mut k = 0;
            loop {
                let before = pool.stats();
                backend.fail_call(k);
                let r = pool.allocate(size, 1, "victim");
                backend.disarm();
                match r {
                    Ok(a) => {
                        pool.free(a.handle).map_err(fail("free"))?;
                        break;
                    }
                    Err(e) => {
                        let after = pool.stats();
                        check(
                            (
                                after.in_use,
                                after.allocations,
                                after.reserved,
                                after.blocks,
                            ) == (
                                before.in_use,
                                before.allocations,
                                before.reserved,
                                before.blocks,
                            ),
                            || {
                                format!(
                                    "{name}: allocate of {size} B failing at call {k} ({e}) left \
                                     {after:?}, was {before:?}"
                                )
                            },
                        )?;
                        pool.check_invariants()
                            .map_err(|m| format!("{name}, call {k}: {m}"))?;
                    }
                }
                k += 1;
                check(k < 64, || format!("{name}: allocate never succeeded"))?;
            }
        }
        pool.free(keep.handle).map_err(fail("free kept"))?;
        let issued = backend.flush().map_err(fail("flush"))?;
        ctx.mode
            .ticket(backend.as_ref(), issued)
            .await
            .map_err(fail("sync"))?;
        pool.trim().map_err(fail("trim"))?;
        check(pool.stats().reserved == 0, || {
            format!("{name}: blocks left after trim: {:?}", pool.stats())
        })?;
    }
    Ok(())
}

/// A free whose backend call fails keeps the allocation live and freeable; after device loss
/// nothing is allocated any more.
async fn failed_free_is_retryable(ctx: &Ctx) -> R {
    let backend = faulty(ctx);
    let rt = Runtime::new(backend.clone(), RuntimeConfig::default()).map_err(fail("runtime"))?;
    let pool = rt.device_pool();
    let t = ctx
        .tensor_from(&rt, DType::U8, &[4096], &pattern(4096, 3), "busy")
        .await
        .map_err(fail("tensor"))?;
    let a = t.allocation();
    // Work in flight on the tensor: the free has to ask the backend whether it completed.
    let fill = backend.fill_zero(a.range).map_err(fail("fill"))?;
    pool.mark_used(a.handle, fill).map_err(fail("mark"))?;
    let before = pool.stats();
    backend.fail_call(0);
    let first = pool.free(a.handle);
    backend.disarm();
    check(first.is_err(), || {
        "the injected failure did not fire".into()
    })?;
    check(pool.stats() == before, || {
        format!(
            "failed free changed the pool: {:?} -> {:?}",
            before,
            pool.stats()
        )
    })?;
    pool.resolve(a.handle)
        .map_err(|e| format!("failed free lost the allocation: {e}"))?;
    pool.free(a.handle)
        .map_err(|e| format!("retry after a failed free: {e}"))?;
    check(
        matches!(pool.free(a.handle), Err(Error::DoubleFree { .. })),
        || "third free is not a double free".into(),
    )?;
    drop(t);
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    pool.check_invariants()?;
    // After loss: no allocation succeeds, from a fresh block or from a warm one.
    let warm = rt.alloc(DType::U8, &[64], "warm").map_err(fail("warm"))?;
    backend.lose();
    for label in ["after loss", "again"] {
        match rt.alloc(DType::U8, &[64], label) {
            Err(Error::DeviceLost { .. }) => {}
            other => return Err(format!("alloc after device loss: {other:?}")),
        }
    }
    match pool.free(warm.allocation().handle) {
        Err(Error::DeviceLost { .. }) | Ok(()) => Ok(()),
        Err(e) => Err(format!("free after loss: {e}")),
    }
}

/// A device capped at 4 MiB, with staged transfers: once device tensors filled the cap and were
/// freed, uploads and downloads must still work (the belt makes the device pool release its idle
/// blocks), and a device allocation must get the belt's idle blocks back.
async fn pools_reclaim_from_each_other(ctx: &Ctx) -> R {
    let backend = faulty(ctx);
    backend.set_cap(4 << 20);
    let rt = Runtime::new(
        backend.clone(),
        RuntimeConfig {
            device: PoolConfig {
                block_size: 1 << 20,
                ..PoolConfig::device()
            },
            staging: StagingConfig {
                block_size: 256 << 10,
                ..StagingConfig::default()
            },
            force_staging: true,
            ..RuntimeConfig::default()
        },
    )
    .map_err(fail("runtime"))?;
    // Fill the device: four 1 MiB tensors in 1 MiB blocks hold every byte of the cap. (Blocks
    // hold whole requests: 768 KiB fillers made 768 KiB blocks and left 256 KiB of the cap
    // free, so the belt needed no pressure.)
    let mut tensors = Vec::new();
    loop {
        match rt.alloc(DType::U8, &[1 << 20], "filler") {
            Ok(t) => tensors.push(t),
            Err(Error::OutOfMemory(_)) => break,
            Err(e) => return Err(format!("filler: {e}")),
        }
        check(tensors.len() < 16, || "the cap did not bind".into())?;
    }
    check(backend.block_bytes() == 4 << 20, || {
        format!("device holds {} B, not the cap", backend.block_bytes())
    })?;
    for t in tensors.drain(..) {
        rt.free(t).map_err(fail("free filler"))?;
    }
    // The device pool now holds the whole cap in empty blocks. A staged upload needs a belt block.
    let data = pattern(100 << 10, 9);
    let t = ctx
        .tensor_from(&rt, DType::U8, &[data.len()], &data, "after freeing")
        .await
        .map_err(|e| format!("upload after freeing every tensor: {e}"))?;
    let back: Vec<u8> = ctx
        .download(&rt, &t)
        .await
        .map_err(|e| format!("download after freeing every tensor: {e}"))?;
    check(back == data, || "round trip damaged".into())?;
    rt.free(t).map_err(fail("free"))?;
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    // The other direction: the belt holds idle blocks; the device needs the whole cap again.
    let belt_blocks = rt.staging().stats().blocks;
    check(belt_blocks > 0, || "the belt kept no block".into())?;
    let full = rt
        .alloc(DType::U8, &[4 << 20], "the whole cap")
        .map_err(|e| format!("device allocation with idle belt blocks: {e}"))?;
    check(rt.staging().stats().blocks == 0, || {
        "the belt kept its blocks under pressure".into()
    })?;
    rt.free(full).map_err(fail("free"))?;
    rt.check_leaks().map_err(fail("leaks"))?;
    rt.device_pool().check_invariants()
}
