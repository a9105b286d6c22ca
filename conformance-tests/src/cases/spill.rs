//! Spill under pressure (issue 16): a spilling pool under pressure from 8 threads loses no byte,
//! keeps its arena within budget and holds nothing spilled at the end; 16 threads of the stress
//! workload (issue 46) read back every byte they wrote. Native only: `SpillPool`
//! blocks on its copies and a browser page has one thread, so this module is not compiled on
//! `wasm32`.

use std::sync::{Arc, OnceLock};

use tensormem::pool::{ArenaConfig, ArenaPool, SpillConfig, SpillPool};
use tensormem::{DevicePool, Runtime, RuntimeConfig, Tensor};

use super::on_threads;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "offload: spill under pressure from 8 threads loses no data",
            spill_from_eight_threads,
            native_only: "threads: a browser page has one thread here"
        ),
        case!(
            "offload: spill stress from 16 threads reads back every byte of every live tensor",
            spill_stress_sixteen_threads,
            native_only: "threads: a browser page has one thread here"
        ),
    ]
}

/// The stress workload of [`crate::spill_stress`], briefly, without and with pins.
async fn spill_stress_sixteen_threads(ctx: &Ctx) -> R {
    for pins in [false, true] {
        let time = std::time::Duration::from_millis(300);
        let r = crate::spill_stress::run(ctx.backend.clone(), false, 16, pins, time)?;
        check(r.errors.is_empty(), || {
            format!("pins {pins}: {:?}", r.errors)
        })?;
        check(r.bad_reads == 0 && r.reads > 0, || {
            format!("pins {pins}: {r:?}")
        })?;
        check(r.spills > 0, || {
            format!("pins {pins}: nothing spilled: {r:?}")
        })?;
    }
    Ok(())
}

async fn spill_from_eight_threads(ctx: &Ctx) -> R {
    const LEN: usize = 16 << 10; // 64 KiB of u32
    let spill: Arc<OnceLock<Arc<SpillPool>>> = Arc::new(OnceLock::new());
    let keep = spill.clone();
    let rt = Runtime::with_pool(
        ctx.backend.clone(),
        RuntimeConfig::default(),
        move |b, _budget| {
            let arena = ArenaPool::new(
                b.clone(),
                ArenaConfig {
                    block_size: 64 << 10,
                    budget: Some(8 << 16),
                    in_place: false,
                    ..ArenaConfig::device()
                },
            )?;
            let pool = Arc::new(SpillPool::new(Arc::new(arena), b, SpillConfig::default()));
            let _ = keep.set(pool.clone());
            Ok(pool)
        },
    )
    .map_err(fail("runtime"))?;
    let pool = spill.get().ok_or("no spill pool")?.clone();
    let pattern = |seed: u32| -> Vec<u32> {
        (0..LEN as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
            .collect()
    };
    // Every thread holds its tensors before any reads them back, so the 48 are live together
    // however the threads are scheduled (a fast build could otherwise run them one by one,
    // within the budget).
    let all_live = std::sync::Barrier::new(8);
    on_threads(8, |thread| {
        let mut mine: Vec<(Tensor, u32)> = Vec::new();
        let made = (0..6).try_for_each(|k| {
            let seed = thread * 100 + k;
            let t = rt
                .tensor_from(tensormem::DType::U32, &[LEN], &pattern(seed), "t")
                .map_err(fail("tensor"))?;
            mine.push((t, seed));
            Ok::<(), String>(())
        });
        // Reached even after a failure, so no thread waits forever.
        all_live.wait();
        made?;
        for (t, seed) in mine.iter().rev().chain(mine.iter()) {
            let got: Vec<u32> = rt.download(t).map_err(fail("download"))?;
            check(got == pattern(*seed), || {
                format!("thread {thread}: tensor {seed} lost its bytes")
            })?;
        }
        for (t, _) in mine {
            rt.free(t).map_err(fail("free"))?;
        }
        Ok(())
    })?;
    let stats = pool.spill_stats();
    check(stats.spills > 0 && stats.restores > 0, || {
        format!("48 tensors of 64 KiB in 512 KiB spilled nothing: {stats:?}")
    })?;
    check(stats.spilled_now == 0, || format!("{stats:?}"))?;
    check(rt.device_pool().stats().peak_reserved <= 8 << 16, || {
        "the arena grew past its budget".into()
    })?;
    pool.check_invariants()?;
    rt.check_leaks().map_err(fail("leaks"))
}
