//! Device sets (two-device targets only): an op over two devices is a typed error and enqueues
//! nothing; cross-device copies from eight threads at once move every byte; a model split across
//! the two devices computes the single-device output bit for bit within per-device budgets.

use std::sync::Arc;

use tensormem::devices::TransferPath;
use tensormem::devices::samples::mlp;
use tensormem::{
    DType, DeviceId, DeviceSet, Error, Op, Placement, PoolConfig, RuntimeConfig, Ticket, Waiting,
};

use super::Rng;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "devices_mixed_op_is_an_error",
            mixed_op_is_an_error,
            two_devices
        ),
        case!(
            "devices_copies_from_8_threads",
            copies_from_8_threads,
            two_devices
        ),
        case!(
            "devices_copy_orders_with_both_timelines",
            copy_orders_with_both_timelines,
            two_devices
        ),
        case!(
            "devices_split_model_bit_exact",
            split_model_bit_exact,
            two_devices
        ),
    ]
}

async fn mixed_op_is_an_error(ctx: &Ctx) -> R {
    let set = ctx
        .device_set(RuntimeConfig::default())
        .map_err(fail("set"))?;
    let x = set
        .alloc(DeviceId(0), DType::F32, &[16], "x")
        .map_err(fail("alloc x"))?;
    let y = set
        .alloc(DeviceId(1), DType::F32, &[16], "y")
        .map_err(fail("alloc y"))?;
    let before: Vec<Ticket> = set
        .runtimes()
        .iter()
        .map(|rt| rt.backend().flush())
        .collect::<tensormem::Result<_>>()
        .map_err(fail("flush"))?;
    match set.dispatch(&Op::Relu { len: 16 }, &[&x], &[&y]) {
        Err(Error::MixedDevices {
            op, first, second, ..
        }) => check(
            op == "relu" && first == DeviceId(0) && second == DeviceId(1),
            || format!("MixedDevices names {op}, {first}, {second}"),
        )?,
        other => {
            return Err(format!(
                "relu over two devices: expected MixedDevices, got {other:?}"
            ));
        }
    }
    let rt1 = set.device(DeviceId(1)).map_err(fail("device 1"))?;
    match ctx.upload(rt1, &x, &[1f32; 16]).await {
        Err(Error::WrongDevice {
            tensor, runtime, ..
        }) => check(tensor == DeviceId(0) && runtime == DeviceId(1), || {
            format!("WrongDevice names {tensor}, {runtime}")
        })?,
        other => {
            return Err(format!(
                "upload to another device: expected WrongDevice, got {other:?}"
            ));
        }
    }
    let after: Vec<Ticket> = set
        .runtimes()
        .iter()
        .map(|rt| rt.backend().flush())
        .collect::<tensormem::Result<_>>()
        .map_err(fail("flush"))?;
    check(before == after, || {
        format!("refused calls enqueued work: tickets {before:?} -> {after:?}")
    })?;
    set.free(x).map_err(fail("free x"))?;
    set.free(y).map_err(fail("free y"))
}

/// Eight threads, each copying tensors of random sizes (some beyond one staging chunk) back and
/// forth between the devices and checking every byte, all at once.
async fn copies_from_8_threads(ctx: &Ctx) -> R {
    let set = ctx
        .device_set(RuntimeConfig::default())
        .map_err(fail("set"))?;
    let mode = ctx.mode;
    let set = Arc::new(set);
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                let set = set.clone();
                s.spawn(move || pollster::block_on(copy_rounds(&set, mode, i)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let mut copied = 0;
    for (i, r) in results.into_iter().enumerate() {
        copied += r.map_err(|e| format!("thread {i}: {e}"))?;
    }
    // Every copy crossed devices, on whichever path the pair offers (staged, or direct where
    // the backend has one: two CUDA backends on one GPU copy device to device).
    let stats = set.transfer_stats();
    let across: u64 = [
        TransferPath::Staged,
        TransferPath::SharedDevice,
        TransferPath::PeerToPeer,
    ]
    .into_iter()
    .map(|p| stats.bytes(p))
    .sum();
    check(across == copied, || {
        format!("{copied} bytes copied across devices, {across} counted ({stats:?})")
    })
}

/// Six copies from one device to the other; returns the bytes copied.
async fn copy_rounds(set: &DeviceSet, mode: Waiting, seed: u64) -> Result<u64, String> {
    let ctx = Ctx {
        backend: set.runtimes()[0].backend().clone(),
        peer: None,
        mode,
    };
    let mut rng = Rng::new(seed + 1);
    let mut copied = 0;
    for round in 0..6 {
        let n = 1 + rng.below(if round % 3 == 0 { 400 << 10 } else { 4 << 10 }) as usize;
        let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        let from = DeviceId((seed + round) as u32 % 2);
        let to = DeviceId(1 - from.0);
        let rt_from = set.device(from).map_err(fail("device"))?;
        let src = ctx
            .tensor_from(rt_from, DType::U8, &[n], &data, "src")
            .await
            .map_err(fail("upload"))?;
        let dst = set
            .alloc(to, DType::U8, &[n], "dst")
            .map_err(fail("alloc dst"))?;
        ctx.copy(set, &src, &dst).await.map_err(fail("copy"))?;
        let back: Vec<u8> = ctx
            .download(set.device(to).map_err(fail("device"))?, &dst)
            .await
            .map_err(fail("download"))?;
        check(back == data, || {
            format!("round {round}: {n} bytes from {from} to {to} differ")
        })?;
        set.free(src).map_err(fail("free src"))?;
        set.free(dst).map_err(fail("free dst"))?;
        copied += n as u64;
    }
    Ok(copied)
}

/// A copy follows the source's queued kernel and precedes the destination's next one, and the
/// source may be freed (and its memory reused) right after the copy: nothing is waited for by
/// hand, so a direct path that skipped either timeline's ordering reads or leaves wrong bytes.
async fn copy_orders_with_both_timelines(ctx: &Ctx) -> R {
    let set = ctx
        .device_set(RuntimeConfig::default())
        .map_err(fail("set"))?;
    let (d0, d1) = (
        set.device(DeviceId(0)).map_err(fail("device 0"))?,
        set.device(DeviceId(1)).map_err(fail("device 1"))?,
    );
    let n = 300_000usize;
    for round in 0..3u32 {
        let x: Vec<f32> = (0..n)
            .map(|i| (i as f32 - n as f32 / 2.0) * (round as f32 + 0.5))
            .collect();
        let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
        let relu = Op::Relu { len: n as u32 };
        let xt = ctx
            .tensor_from(d0, DType::F32, &[n], &x, "x")
            .await
            .map_err(fail("upload"))?;
        let y0 = set
            .alloc(DeviceId(0), DType::F32, &[n], "y0")
            .map_err(fail("alloc"))?;
        set.dispatch(&relu, &[&xt], &[&y0])
            .map_err(fail("relu on 0"))?;
        let z1 = set
            .alloc(DeviceId(1), DType::F32, &[n], "z1")
            .map_err(fail("alloc"))?;
        ctx.copy(&set, &y0, &z1).await.map_err(fail("copy"))?;
        // Freed at once: its reuse waits for the copy, whichever path it took.
        set.free(y0).map_err(fail("free y0"))?;
        let junk = vec![-7.0f32; n];
        let w0 = ctx
            .tensor_from(d0, DType::F32, &[n], &junk, "reuses y0")
            .await
            .map_err(fail("upload junk"))?;
        let u1 = set
            .alloc(DeviceId(1), DType::F32, &[n], "u1")
            .map_err(fail("alloc"))?;
        set.dispatch(&relu, &[&z1], &[&u1])
            .map_err(fail("relu on 1"))?;
        for (t, what) in [(&z1, "copied"), (&u1, "relu of copied")] {
            let got: Vec<f32> = ctx.download(d1, t).await.map_err(fail("download"))?;
            check(got == want, || {
                format!("round {round}: {what} tensor differs")
            })?;
        }
        for t in [xt, w0] {
            set.free(t).map_err(fail("free"))?;
        }
        for t in [z1, u1] {
            set.free(t).map_err(fail("free"))?;
        }
    }
    Ok(())
}

/// The sample MLP on the first device alone, then split across both: balanced by weight bytes
/// with per-device budgets that hold a device's share but not the whole model's weights, and
/// alternating per node (a cut at every edge). Devices of one backend agree with the single
/// device bit for bit; a mixed pair (different kernels) within the op tolerance. No device's
/// peak passes its budget.
async fn split_model_bit_exact(ctx: &Ctx) -> R {
    let m = mlp(4, 16, 128, 11).map_err(fail("graph"))?;
    let weight_bytes: u64 = m.weights.iter().map(|w| w.1.len() as u64).sum();
    let one = DeviceSet::new(vec![ctx.backend.clone()], RuntimeConfig::default())
        .map_err(fail("one device"))?;
    let want = run(ctx, &one, &m, &Placement::BalancedByWeights).await?;
    let budget = weight_bytes * 15 / 16;
    let budgeted = ctx
        .device_set(RuntimeConfig {
            device: PoolConfig {
                budget: Some(budget),
                block_size: 16 << 10,
                ..PoolConfig::device()
            },
            ..RuntimeConfig::default()
        })
        .map_err(fail("set"))?;
    let got = run(ctx, &budgeted, &m, &Placement::BalancedByWeights).await?;
    compare(ctx, "balanced", &got, &want)?;
    for d in budgeted.report() {
        check(d.peak_reserved <= budget, || {
            format!(
                "{}: peak {} bytes above its budget {budget}",
                d.device, d.peak_reserved
            )
        })?;
    }
    let set = ctx
        .device_set(RuntimeConfig::default())
        .map_err(fail("set"))?;
    let alternate = Placement::from_fn(&m.graph, |i, _| DeviceId((i % 2) as u32));
    let got = run(ctx, &set, &m, &alternate).await?;
    compare(ctx, "alternating", &got, &want)
}

/// Bit for bit when both devices run one backend's kernels, else within the op tolerance.
fn compare(ctx: &Ctx, name: &str, got: &[u32], want: &[u32]) -> R {
    let same_kernels = ctx
        .peer
        .as_ref()
        .is_some_and(|p| p.capabilities().backend == ctx.backend.capabilities().backend);
    if same_kernels {
        let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
        check(differ == 0 && got.len() == want.len(), || {
            format!(
                "{name} split: {differ} of {} output values differ from one device",
                want.len()
            )
        })
    } else {
        let f = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|b| b.to_le_bytes()).collect() };
        tensormem::ops::samples::compare_f32(&f(got), &f(want), 1e-4)
            .map_err(|e| format!("{name} split on mixed devices: {e}"))
    }
}

/// Compiles, binds, runs and reads the MLP on `set` by `placement`; the output's bits.
async fn run(
    ctx: &Ctx,
    set: &DeviceSet,
    m: &tensormem::devices::samples::Mlp,
    placement: &Placement,
) -> std::result::Result<Vec<u32>, String> {
    let mut model = set.compile(&m.graph, placement).map_err(fail("compile"))?;
    let out: Vec<f32> = match ctx.mode {
        Waiting::Blocking => {
            for (id, bytes) in &m.weights {
                model.set_weight(*id, bytes).map_err(fail("weight"))?;
            }
            model
                .set_input(m.input, &m.input_data)
                .map_err(fail("input"))?;
            model.run().map_err(fail("run"))?;
            model.read_output(m.output).map_err(fail("read"))?
        }
        Waiting::Async => {
            for (id, bytes) in &m.weights {
                model
                    .set_weight_async(*id, bytes)
                    .await
                    .map_err(fail("weight"))?;
            }
            model
                .set_input_async(m.input, &m.input_data)
                .await
                .map_err(fail("input"))?;
            model.run_async().await.map_err(fail("run"))?;
            model
                .read_output_async(m.output)
                .await
                .map_err(fail("read"))?
        }
    };
    Ok(out.iter().map(|v| v.to_bits()).collect())
}
