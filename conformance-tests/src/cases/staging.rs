//! Staging under pressure: many transfers of random sizes through a small belt, every byte checked;
//! transfers larger than the belt are chunked; the belt trims itself.

use tensormem::{DType, Runtime, RuntimeConfig, StagingConfig};

use super::Rng;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("staging_under_pressure", staging_under_pressure),
        case!("staging_larger_than_belt", staging_larger_than_belt),
        case!("host_memory_placement_is_reported", host_memory_placement),
    ]
}

fn small_belt(
    ctx: &Ctx,
    block_size: u64,
    idle_ms: u64,
    keep_blocks: usize,
) -> Result<Runtime, String> {
    ctx.runtime(RuntimeConfig {
        staging: StagingConfig {
            block_size,
            max_blocks: 2,
            keep_blocks,
            idle_trim_after: std::time::Duration::from_millis(idle_ms),
        },
        // Exercise the belt even where device memory is host-visible.
        force_staging: true,
        ..RuntimeConfig::default()
    })
    .map_err(fail("runtime"))
}

async fn staging_under_pressure(ctx: &Ctx) -> R {
    let rt = small_belt(ctx, 64 << 10, 10_000, 1)?;
    let mut rng = Rng::new(42);
    let mut live: Vec<(tensormem::Tensor, Vec<u8>)> = Vec::new();
    for i in 0..2000u64 {
        let n = 1 + rng.below(if i % 50 == 0 { 300 << 10 } else { 20 << 10 }) as usize;
        let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        let t = ctx
            .tensor_from(&rt, DType::U8, &[n], &data, "pressure")
            .await
            .map_err(fail("upload"))?;
        live.push((t, data));
        if live.len() > 16 || rng.below(2) == 0 {
            let (t, data) = live.swap_remove(rng.below(live.len() as u64) as usize);
            let back: Vec<u8> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
            check(back == data, || {
                format!("transfer {i}: {} bytes differ", data.len())
            })?;
            rt.free(t).map_err(fail("free"))?;
        }
    }
    for (t, data) in live {
        let back: Vec<u8> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
        check(back == data, || "final readback differs".into())?;
        rt.free(t).map_err(fail("free"))?;
    }
    let s = rt.staging().stats();
    check(s.blocks <= 4, || format!("belt grew past its limit: {s:?}"))?;
    check(s.uploaded > 0 && s.downloaded > 0, || {
        format!("belt unused: {s:?}")
    })?;
    Ok(())
}

async fn staging_larger_than_belt(ctx: &Ctx) -> R {
    let rt = small_belt(ctx, 64 << 10, 0, 0)?;
    let n = (1 << 20) + 12_345;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
    let t = ctx
        .tensor_from(&rt, DType::U8, &[n], &data, "big")
        .await
        .map_err(fail("upload"))?;
    let back: Vec<u8> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
    check(back == data, || "chunked transfer differs".into())?;
    let s = rt.staging().stats();
    check(s.chunks >= 2 * (n as u64 / (64 << 10)), || {
        format!("not chunked: {s:?}")
    })?;
    rt.free(t).map_err(fail("free"))?;
    // Idle trim (threshold 0, keep 0 here): once the work completes, every block goes back.
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    rt.staging().trim().map_err(fail("trim"))?;
    let s = rt.staging().stats();
    check(s.blocks == 0 && s.reserved == 0, || {
        format!("belt did not trim: {s:?}")
    })?;
    check(s.blocks_freed > 0, || {
        format!("belt never released a block: {s:?}")
    })?;
    Ok(())
}

/// Issue 20: every backend says where its host memory lives, the memory report carries the same,
/// and a backend claims a NUMA binding only where there is a choice (two or more nodes, the node
/// among them).
async fn host_memory_placement(ctx: &Ctx) -> R {
    let placement = ctx.backend.capabilities().host_placement.clone();
    check(!placement.to_string().is_empty(), || {
        "empty placement".into()
    })?;
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(node) = placement.bound_node() {
        let topology = tensormem::numa::NumaTopology::system().map_err(fail("topology"))?;
        check(
            topology.nodes().len() >= 2 && topology.node(node).is_some(),
            || format!("bound to node {node} of {topology:?}"),
        )?;
    }
    let rt = small_belt(ctx, 64 << 10, 10_000, 1)?;
    let mut g = tensormem::Graph::new();
    let x = g.input("x", DType::F32, &[4]);
    let y = g
        .op(tensormem::Op::Relu { len: 4 }, &[x], &[4], "relu")
        .map_err(fail("graph"))?;
    g.output(y);
    let model = rt.compile(&g).map_err(fail("compile"))?;
    let report = model.memory_report();
    check(report.host_memory == placement, || {
        format!(
            "report says {:?}, backend {placement:?}",
            report.host_memory
        )
    })
}
