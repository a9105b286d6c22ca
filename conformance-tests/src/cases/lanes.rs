//! The transfer lane on every target: copies and fills on it are correct; a transfer after a
//! compute ticket sees that kernel's results; compute after a transfer ticket sees the copied
//! bytes; memory a transfer still reads is not reused after a free; transfer tickets poll and
//! await like compute tickets, and a ticket never issued is refused. Where the lane is collapsed
//! onto the compute queue the results are the same. Copies read `Readback` and write `Upload`
//! memory on both lanes exactly where the backend says it can (`host_visible_copies`).

use std::sync::Arc;

use tensormem::backend::{BlockDesc, BlockRange, lanes};
use tensormem::{
    Backend, BlockId, DType, Error, HostAccess, MemoryKind, Op, Ticket, TransferLane,
    TransferTicket, Validated,
};

use super::{bytes, floats, runtime};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("transfer_lane_copies_and_fills", copies_and_fills),
        case!("transfer_after_compute_sees_results", after_compute),
        case!("compute_after_transfer_sees_copied_data", after_transfer),
        case!(
            "transfer_read_memory_not_reused_after_free",
            freed_while_read
        ),
        case!("transfer_tickets_unknown_refused", unknown_ticket),
        case!(
            "copies_out_of_and_into_host_visible_memory_where_capable",
            host_visible_copies
        ),
    ]
}

const N: usize = 4096;

fn input(seed: f32) -> Vec<f32> {
    (0..N).map(|i| (i as f32 - N as f32 / 2.0) * seed).collect()
}

fn whole(block: BlockId) -> BlockRange {
    BlockRange {
        block,
        offset: 0,
        size: N as u64 * 4,
    }
}

/// The front over the target's backend, and blocks of `kinds` of `N` floats each.
fn blocks(ctx: &Ctx, kinds: &[MemoryKind]) -> Result<(Arc<dyn Backend>, Vec<BlockId>), String> {
    let front: Arc<dyn Backend> = Arc::new(Validated::new(ctx.backend.clone()));
    let ids = kinds
        .iter()
        .map(|&kind| {
            front.alloc_block(&BlockDesc {
                kind,
                size: N as u64 * 4,
                label: kind.name(),
            })
        })
        .collect::<tensormem::Result<Vec<_>>>()
        .map_err(fail("alloc"))?;
    Ok((front, ids))
}

async fn write(ctx: &Ctx, front: &dyn Backend, block: BlockId, data: &[f32]) -> R {
    ctx.mode
        .host_access(front, block, HostAccess::Write)
        .await
        .map_err(fail("host access for write"))?;
    front
        .write_mapped(block, 0, &bytes(data))
        .map_err(fail("write upload block"))
}

async fn read(ctx: &Ctx, front: &dyn Backend, block: BlockId) -> Result<Vec<f32>, String> {
    ctx.mode
        .host_access(front, block, HostAccess::Read)
        .await
        .map_err(fail("host access for read"))?;
    let mut out = vec![0u8; N * 4];
    front
        .read_mapped(block, 0, &mut out)
        .map_err(fail("read readback block"))?;
    Ok(floats(&out))
}

/// Equal values (`-0.0 == 0.0`: a kernel's `max(-0.0, 0.0)` may return either zero).
fn same(got: &[f32], want: &[f32], what: &str) -> R {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values (want {})",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {} (want {})",
            got[i], want[i]
        )),
    }
}

/// Upload -> device -> readback on the transfer lane alone, then a fill of the device block,
/// waiting only for the last transfer ticket (in-lane order).
async fn copies_and_fills(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Readback, Upload};
    let (front, b) = blocks(ctx, &[Upload, DeviceLocal, Readback])?;
    let x = input(0.25);
    write(ctx, front.as_ref(), b[0], &x).await?;
    lanes::of(front.as_ref())
        .transfer_copy(whole(b[0]), whole(b[1]))
        .map_err(fail("transfer copy in"))?;
    let out = lanes::of(front.as_ref())
        .transfer_copy(whole(b[1]), whole(b[2]))
        .map_err(fail("transfer copy out"))?;
    ctx.mode
        .transfer(front.as_ref(), out)
        .await
        .map_err(fail("wait transfer"))?;
    check(
        lanes::of(front.as_ref())
            .transfer_completed()
            .map_err(fail("completed"))?
            >= out,
        || "transfer_completed is below a ticket that was waited for".into(),
    )?;
    same(&read(ctx, front.as_ref(), b[2]).await?, &x, "round trip")?;
    let half = BlockRange {
        size: N as u64 * 2,
        ..whole(b[1])
    };
    lanes::of(front.as_ref())
        .transfer_fill_zero(half)
        .map_err(fail("transfer fill"))?;
    let out = lanes::of(front.as_ref())
        .transfer_copy(whole(b[1]), whole(b[2]))
        .map_err(fail("transfer copy out after fill"))?;
    ctx.mode
        .transfer(front.as_ref(), out)
        .await
        .map_err(fail("wait transfer"))?;
    let mut want = x.clone();
    want[..N / 2].fill(0.0);
    same(&read(ctx, front.as_ref(), b[2]).await?, &want, "after fill")
}

/// A kernel on the compute lane, then a transfer ordered after it that copies its output out:
/// waiting for the transfer ticket alone must see the kernel's result.
async fn after_compute(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Readback, Upload};
    let (front, b) = blocks(ctx, &[Upload, DeviceLocal, DeviceLocal, Readback])?;
    let x = input(0.5);
    write(ctx, front.as_ref(), b[0], &x).await?;
    front
        .copy(whole(b[0]), whole(b[1]))
        .map_err(fail("copy in"))?;
    let relu = front
        .dispatch(&Op::Relu { len: N as u32 }, &[whole(b[1]), whole(b[2])])
        .map_err(fail("relu"))?;
    lanes::of(front.as_ref())
        .transfer_after(relu)
        .map_err(fail("transfer_after"))?;
    let out = lanes::of(front.as_ref())
        .transfer_copy(whole(b[2]), whole(b[3]))
        .map_err(fail("transfer copy out"))?;
    ctx.mode
        .transfer(front.as_ref(), out)
        .await
        .map_err(fail("wait transfer"))?;
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    same(
        &read(ctx, front.as_ref(), b[3]).await?,
        &want,
        "relu copied out",
    )
}

/// A copy on the transfer lane, then a kernel ordered after it through the joined ticket: the
/// kernel reads the copied bytes, and the joined ticket covers the transfer.
async fn after_transfer(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Readback, Upload};
    let (front, b) = blocks(ctx, &[Upload, DeviceLocal, DeviceLocal, Readback])?;
    let x = input(-0.75);
    write(ctx, front.as_ref(), b[0], &x).await?;
    let copied = lanes::of(front.as_ref())
        .transfer_copy(whole(b[0]), whole(b[1]))
        .map_err(fail("transfer copy in"))?;
    let joined = lanes::of(front.as_ref())
        .compute_after(copied)
        .map_err(fail("compute_after"))?;
    front
        .dispatch(&Op::Relu { len: N as u32 }, &[whole(b[1]), whole(b[2])])
        .map_err(fail("relu"))?;
    let out = front
        .copy(whole(b[2]), whole(b[3]))
        .map_err(fail("copy out"))?;
    ctx.mode
        .ticket(front.as_ref(), joined)
        .await
        .map_err(fail("wait joined"))?;
    check(
        lanes::of(front.as_ref())
            .transfer_completed()
            .map_err(fail("completed"))?
            >= copied,
        || "the joined ticket completed before the transfer it joins".into(),
    )?;
    ctx.mode
        .ticket(front.as_ref(), out)
        .await
        .map_err(fail("wait copy out"))?;
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    same(
        &read(ctx, front.as_ref(), b[3]).await?,
        &want,
        "relu of copied data",
    )
}

/// A tensor is copied out on the transfer lane and freed at once; a new tensor of the same size
/// is then written. The free must wait for the transfer (the front joins it), so the copy still
/// reads the first tensor's values.
async fn freed_while_read(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let front = rt.backend().clone();
    let x = input(1.5);
    let a = rt
        .alloc(DType::F32, &[N], "read by the transfer lane")
        .map_err(fail("tensor a"))?;
    // The upload is compute-lane work (a staged copy where memory is not host-visible): the lane
    // reads `a` only after it.
    let uploaded = ctx.upload(&rt, &a, &x).await.map_err(fail("upload a"))?;
    lanes::of(front.as_ref())
        .transfer_after(uploaded)
        .map_err(fail("transfer_after"))?;
    let src = rt
        .device_pool()
        .resolve(a.allocation().handle)
        .map_err(fail("resolve a"))?;
    let rb = front
        .alloc_block(&BlockDesc {
            kind: MemoryKind::Readback,
            size: N as u64 * 4,
            label: "readback",
        })
        .map_err(fail("alloc readback"))?;
    let mut copies = Vec::new();
    // Several copies of the same bytes, so the lane is still busy when the free comes.
    for _ in 0..8 {
        copies.push(
            lanes::of(front.as_ref())
                .transfer_copy(src, whole(rb))
                .map_err(fail("transfer copy"))?,
        );
    }
    rt.free(a).map_err(fail("free a"))?;
    let y = input(-3.0);
    let b = ctx
        .tensor_from(&rt, DType::F32, &[N], &y, "written after the free")
        .await
        .map_err(fail("tensor b"))?;
    let last = copies.last().copied().unwrap_or(TransferTicket::DONE);
    ctx.mode
        .transfer(front.as_ref(), last)
        .await
        .map_err(fail("wait transfer"))?;
    same(
        &read(ctx, front.as_ref(), rb).await?,
        &x,
        "copy of the freed tensor",
    )?;
    same(
        &ctx.download::<f32>(&rt, &b)
            .await
            .map_err(fail("download b"))?,
        &y,
        "tensor written after the free",
    )?;
    ctx.synchronize(&rt).await.map_err(fail("synchronize"))?;
    rt.free(b).map_err(fail("free b"))?;
    front.free_block(rb).map_err(fail("free readback"))
}

/// A transfer ticket never issued is refused by waits and polls, not waited for forever; the
/// lane reports whether it runs concurrently (collapsed lanes must still be usable).
async fn unknown_ticket(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Upload};
    let (front, b) = blocks(ctx, &[Upload, DeviceLocal])?;
    let t = lanes::of(front.as_ref())
        .transfer_copy(whole(b[0]), whole(b[1]))
        .map_err(fail("transfer copy"))?;
    let lane = lanes::of(front.as_ref()).transfer_lane();
    check(
        lane == lanes::of(ctx.backend.as_ref()).transfer_lane(),
        || format!("the front reports a {} lane", lane.name()),
    )?;
    let never = TransferTicket(t.0 + 1_000_000);
    match ctx.mode.transfer(front.as_ref(), never).await {
        Err(Error::UnknownTicket { .. }) => {}
        other => {
            return Err(format!(
                "waiting for a transfer ticket never issued: {other:?}"
            ));
        }
    }
    match lanes::of(front.as_ref()).compute_after(never) {
        Err(Error::UnknownTicket { .. }) => {}
        other => return Err(format!("joining a transfer ticket never issued: {other:?}")),
    }
    if lane == TransferLane::Collapsed {
        // A collapsed lane's transfer ticket is its compute ticket: the same wait completes it.
        ctx.mode
            .ticket(front.as_ref(), Ticket(t.0))
            .await
            .map_err(fail("wait collapsed ticket"))?;
    }
    ctx.mode
        .transfer(front.as_ref(), t)
        .await
        .map_err(fail("wait transfer"))
}

/// Device → readback → device → upload on each lane where the backend copies both ways (the
/// bytes parked in host-visible memory come back with device copies alone); elsewhere (WebGPU)
/// both reversed directions are refused with `WrongMemoryKind` and nothing is enqueued.
async fn host_visible_copies(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Readback, Upload};
    let (front, b) = blocks(ctx, &[Upload, DeviceLocal, Readback, DeviceLocal, Upload])?;
    let both_ways = front.capabilities().host_visible_copies;
    check(
        both_ways == ctx.backend.capabilities().host_visible_copies,
        || "the front reports another copy rule than the backend".into(),
    )?;
    for (on_lane, seed) in [(false, 1.25f32), (true, -2.5)] {
        let lane = if on_lane { "transfer" } else { "compute" };
        let x = input(seed);
        write(ctx, front.as_ref(), b[0], &x).await?;
        let mut last = (Ticket::DONE, TransferTicket::DONE);
        let mut copy = |src: BlockId, dst: BlockId| -> tensormem::Result<()> {
            if on_lane {
                last.1 = lanes::of(front.as_ref()).transfer_copy(whole(src), whole(dst))?;
            } else {
                last.0 = front.copy(whole(src), whole(dst))?;
            }
            Ok(())
        };
        copy(b[0], b[1]).map_err(fail("upload -> device"))?;
        copy(b[1], b[2]).map_err(fail("device -> readback"))?;
        let from_readback = copy(b[2], b[3]);
        let to_upload = copy(b[3], b[4]);
        if both_ways {
            from_readback.map_err(fail("readback -> device"))?;
            to_upload.map_err(fail("device -> upload"))?;
        } else {
            for (what, got, role) in [
                ("readback as a copy source", from_readback, "copy source"),
                (
                    "upload as a copy destination",
                    to_upload,
                    "copy destination",
                ),
            ] {
                match got {
                    Err(Error::WrongMemoryKind { role: r, .. }) if r == role => {}
                    other => return Err(format!("{lane} lane, {what}: {other:?}")),
                }
            }
        }
        if on_lane {
            ctx.mode.transfer(front.as_ref(), last.1).await
        } else {
            ctx.mode.ticket(front.as_ref(), last.0).await
        }
        .map_err(fail("wait"))?;
        same(
            &read(ctx, front.as_ref(), b[2]).await?,
            &x,
            &format!("{lane} lane: device -> readback"),
        )?;
        if both_ways {
            same(
                &read(ctx, front.as_ref(), b[4]).await?,
                &x,
                &format!("{lane} lane: device -> readback -> device -> upload"),
            )?;
        }
    }
    Ok(())
}
