//! Record and replay on every target (issue 14): a runtime over a
//! [`ReplayPool`](tensormem::pool::ReplayPool) serves repeated steps from one planned arena of the
//! target's memory, a longer step from the plan stretched to it (by the growth of each tensor its
//! shape showed), and every tensor keeps its data while the plan overlaps the ones already dead.

use tensormem::pool::{ReplayConfig, ReplayStats};
use tensormem::{DType, DevicePool, Runtime, RuntimeConfig, Tensor};

use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "replay_steps_keep_their_data_on_planned_and_stretched_arenas",
            steps_on_planned_arenas
        ),
        case!(
            "replay_steps_with_square_temporaries_follow_the_growth_they_showed",
            square_steps_follow_their_growth
        ),
    ]
}

/// Layers of one step: each uploads a wide temporary and the next activation.
const LAYERS: usize = 3;

/// Allocations of one step: the input, and two per layer.
const PER_STEP: u64 = 1 + 2 * LAYERS as u64;

/// Values of tensor `k` of step `step`, `len` of them: distinct per tensor, so data a later tensor
/// wrote over a live one shows.
fn values(step: usize, k: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (step * 1_000_000 + k * 10_000 + i % 9_973) as f32)
        .collect()
}

/// Uploads `values(step, k, rows × cols)` into a new tensor.
async fn upload(
    ctx: &Ctx,
    rt: &Runtime,
    (step, k): (usize, usize),
    rows: usize,
    cols: usize,
) -> std::result::Result<(Tensor, Vec<f32>), String> {
    let data = values(step, k, rows * cols);
    let t = ctx
        .tensor_from(rt, DType::F32, &[rows, cols], &data, "replayed")
        .await
        .map_err(fail("upload"))?;
    Ok((t, data))
}

/// Reads `t` back and compares it with `data`.
async fn intact(ctx: &Ctx, rt: &Runtime, t: &Tensor, data: &[f32], what: &str) -> R {
    let back: Vec<f32> = ctx.download(rt, t).await.map_err(fail("download"))?;
    check(back == data, || format!("{what}: data damaged"))
}

/// Steps of sequence lengths 32, 32, 48, 32: the first records, the second replays its plan, the
/// third (longer than any seen) follows the plan stretched to its first allocation, the fourth the
/// stretched plan. Every tensor reads back intact while the next ones are written.
async fn steps_on_planned_arenas(ctx: &Ctx) -> R {
    let s = run_steps(ctx, &[32, 32, 48, 32], |_| 256).await?;
    check(
        (s.planned, s.stretched, s.divergences) == (3 * PER_STEP, 1, 0),
        || format!("three steps from plans, one stretched, none diverged: {s:?}"),
    )
}

/// Steps of 32, 32, 48, 64 and 48 rows whose temporaries are square (`seq × seq`, attention
/// scores): the step of 48, on the plan stretched in proportion, leaves it at its first
/// temporary and runs on dynamically (one divergence); the step of 64 follows the plan
/// stretched by the growth the shape learned from it, from start to end, and so does the last.
async fn square_steps_follow_their_growth(ctx: &Ctx) -> R {
    let s = run_steps(ctx, &[32, 32, 48, 64, 48], |seq| seq).await?;
    check(
        (s.planned, s.stretched, s.divergences) == (3 * PER_STEP + 1, 2, 1),
        || {
            format!(
                "three steps from plans and the input of the one that diverged, two stretched, \
                 one divergence: {s:?}"
            )
        },
    )
}

/// Runs one step per length through a runtime over a replay pool: per layer a temporary of
/// `seq × temporary(seq)` and the next activation of `seq × 64`, every tensor read back intact
/// while later ones are written. Returns the pool's counts, after checking leaks and its
/// invariants.
async fn run_steps(
    ctx: &Ctx,
    lengths: &[usize],
    temporary: fn(usize) -> usize,
) -> std::result::Result<ReplayStats, String> {
    let (rt, replay) = Runtime::with_replay_pool(
        ctx.backend.clone(),
        RuntimeConfig::default(),
        ReplayConfig::default(),
    )
    .map_err(fail("runtime over a replay pool"))?;
    for (step, &seq) in lengths.iter().enumerate() {
        // Between steps the arena is idle, so the pool may re-size it.
        ctx.synchronize(&rt).await.map_err(fail("sync"))?;
        replay.begin_step().map_err(fail("begin_step"))?;
        let (mut x, mut xd) = upload(ctx, &rt, (step, 0), seq, 64).await?;
        for layer in 0..LAYERS {
            let (h, hd) = upload(ctx, &rt, (step, 2 * layer + 1), seq, temporary(seq)).await?;
            let (y, yd) = upload(ctx, &rt, (step, 2 * layer + 2), seq, 64).await?;
            intact(ctx, &rt, &x, &xd, "the layer's input").await?;
            intact(ctx, &rt, &h, &hd, "the temporary").await?;
            rt.free(h).map_err(fail("free"))?;
            rt.free(x).map_err(fail("free"))?;
            (x, xd) = (y, yd);
        }
        intact(ctx, &rt, &x, &xd, "the step's output").await?;
        rt.free(x).map_err(fail("free"))?;
        replay.end_step().map_err(fail("end_step"))?;
    }
    ctx.synchronize(&rt).await.map_err(fail("sync"))?;
    rt.check_leaks().map_err(fail("leaks"))?;
    replay.check_invariants()?;
    Ok(replay.replay_stats())
}
