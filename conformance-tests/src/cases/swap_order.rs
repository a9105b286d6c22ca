//! The offload executor's swap-in after its copy-out, with nothing else ordering the two (issue
//! 16): the executor's lane state ([`OffloadLanes`]) copies a tensor out to its host slot behind
//! a long copy on the transfer lane, swaps it back in as one device copy into other arena bytes
//! (so no write joins the copy-out), and a kernel reads it. The kernel's output must be that of
//! the tensor, not of the slot's bytes before the copy-out wrote them. Issuing the swap-in on the
//! compute queue without its order after the copy-out makes this case fail on the host and on
//! Vulkan (the executor's old gap: in whole graphs other joins masked it).

use std::sync::Arc;

use tensormem::backend::{BlockDesc, BlockRange};
use tensormem::{Backend, BlockId, HostAccess, MemoryKind, OffloadLanes, Op, Validated};

use super::floats;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![case!(
        "swap_in_follows_its_copy_out_with_nothing_else_ordering_them",
        swap_in_after_copy_out
    )]
}

const N: u64 = 4096;
const BYTES: u64 = N * 4;
/// The copy ahead of the copy-out on the transfer lane: milliseconds on a CPU.
const BIG: u64 = 64 << 20;

fn at(block: BlockId, offset: u64, size: u64) -> BlockRange {
    BlockRange {
        block,
        offset,
        size,
    }
}

async fn read(ctx: &Ctx, front: &dyn Backend, block: BlockId) -> Result<Vec<f32>, String> {
    ctx.mode
        .host_access(front, block, HostAccess::Read)
        .await
        .map_err(fail("host access for read"))?;
    let mut out = vec![0u8; BYTES as usize];
    front
        .read_mapped(block, 0, &mut out)
        .map_err(fail("read slot"))?;
    Ok(floats(&out))
}

async fn swap_in_after_copy_out(ctx: &Ctx) -> R {
    use MemoryKind::{DeviceLocal, Readback, Upload};
    let front: Arc<dyn Backend> = Arc::new(Validated::new(ctx.backend.clone()));
    if !front.capabilities().host_visible_copies {
        // Swap-ins go through the host there (WebGPU): the host waits for the copy-out.
        return Ok(());
    }
    let alloc = |kind: MemoryKind, size: u64| {
        front.alloc_block(&BlockDesc {
            kind,
            size,
            label: "swap order",
        })
    };
    // The arena: the tensor's home at 0, its swapped-in copy at BYTES, the kernel's output at
    // 2 * BYTES (arena offsets are what the lane state tracks copy-outs by).
    let blocks = [
        alloc(DeviceLocal, 3 * BYTES),
        alloc(Upload, BYTES),
        alloc(Readback, BYTES),
        alloc(Readback, BYTES),
        alloc(Upload, BIG),
        alloc(DeviceLocal, BIG),
    ]
    .into_iter()
    .collect::<tensormem::Result<Vec<_>>>()
    .map_err(fail("alloc"))?;
    let (arena, input, slot, out_slot, big_src, big_dst) = (
        blocks[0], blocks[1], blocks[2], blocks[3], blocks[4], blocks[5],
    );
    let x: Vec<f32> = (0..N).map(|i| i as f32 - (N / 2) as f32 + 0.5).collect();
    ctx.mode
        .host_access(front.as_ref(), input, HostAccess::Write)
        .await
        .map_err(fail("host access for write"))?;
    let x_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    front
        .write_mapped(input, 0, &x_bytes)
        .map_err(fail("write input"))?;

    let b = front.as_ref();
    let mut lanes = OffloadLanes::new(b, true, 2);
    // The tensor (root 0) is produced on the compute lane.
    let mut last = b
        .copy(at(input, 0, BYTES), at(arena, 0, BYTES))
        .map_err(fail("produce"))?;
    // A long prefetch (root 1) ahead of the copy-out on the lane.
    lanes
        .copy_in(b, &mut last, 1, at(big_src, 0, BIG), at(big_dst, 0, BIG))
        .map_err(fail("prefetch"))?;
    let out = lanes
        .copy_out(b, &mut last, 0, at(arena, 0, BYTES), at(slot, 0, BYTES))
        .map_err(fail("copy-out"))?;
    lanes
        .swap_in(
            b,
            &mut last,
            0,
            at(slot, 0, BYTES),
            at(arena, BYTES, BYTES),
            out,
        )
        .map_err(fail("swap-in"))?;
    lanes
        .before_compute(b, [0], &[(2 * BYTES, BYTES)])
        .map_err(fail("joins before the kernel"))?;
    last = b
        .dispatch(
            &Op::Relu { len: N as u32 },
            &[at(arena, BYTES, BYTES), at(arena, 2 * BYTES, BYTES)],
        )
        .map_err(fail("relu"))?;
    lanes
        .copy_out(
            b,
            &mut last,
            2 * BYTES,
            at(arena, 2 * BYTES, BYTES),
            at(out_slot, 0, BYTES),
        )
        .map_err(fail("copy-out of the output"))?;
    if let Some(joined) = lanes.finish(b).map_err(fail("finish"))? {
        last = joined;
    }
    ctx.mode.ticket(b, last).await.map_err(fail("wait run"))?;

    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    let got = read(ctx, b, out_slot).await?;
    check(got == want, || {
        let i = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        format!(
            "the kernel read the slot before the copy-out wrote it: element {i} is {} (want {})",
            got[i], want[i]
        )
    })?;
    check(read(ctx, b, slot).await? == x, || {
        "the copy-out wrote other bytes".into()
    })?;
    for block in blocks {
        front.free_block(block).map_err(fail("free"))?;
    }
    Ok(())
}
