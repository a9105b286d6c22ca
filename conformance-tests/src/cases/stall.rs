//! The transfer lane's stall
//! ([`TransferLanes::transfer_stall`](tensormem::TransferLanes::transfer_stall)) on every target:
//! where the backend measures it, the total never goes back, and it grows when compute work is
//! made to wait for a long copy on the transfer lane. Where it does not (a collapsed lane: WebGPU, Vulkan with
//! the lane off), it says so consistently with `None`.

use std::sync::Arc;

use tensormem::backend::{BlockDesc, BlockRange, lanes};
use tensormem::{Backend, BlockId, MemoryKind, TransferTicket, Validated};

use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![case!(
        "transfer_stall_grows_while_compute_waits_for_a_long_copy",
        grows_with_a_long_wait
    )]
}

/// Bytes of each long copy: tens of milliseconds for four of them on a CPU (host, lavapipe).
const BIG: u64 = 32 << 20;
const SMALL: u64 = 4096;

fn range(block: BlockId, size: u64) -> BlockRange {
    BlockRange {
        block,
        offset: 0,
        size,
    }
}

fn stall_of(
    front: &dyn Backend,
    what: &str,
    measured: bool,
) -> Result<Option<std::time::Duration>, String> {
    let s = lanes::of(front).transfer_stall();
    check(s.is_some() == measured, || {
        format!("{what}: the stall is {s:?}, measured before: {measured}")
    })?;
    Ok(s)
}

/// Compute work, then four long copies on the transfer lane ordered after it, then compute work
/// joined to the last copy: the compute lane finishes its own work and waits for the copies.
async fn grows_with_a_long_wait(ctx: &Ctx) -> R {
    let front: Arc<dyn Backend> = Arc::new(Validated::new(ctx.backend.clone()));
    let before = lanes::of(front.as_ref()).transfer_stall();
    let measured = before.is_some();
    let alloc = |size: u64| {
        front.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size,
            label: "stall",
        })
    };
    let blocks = [alloc(SMALL), alloc(SMALL), alloc(BIG), alloc(BIG)]
        .into_iter()
        .collect::<tensormem::Result<Vec<_>>>()
        .map_err(fail("alloc"))?;
    let (s1, s2, src, dst) = (blocks[0], blocks[1], blocks[2], blocks[3]);
    let c = front
        .copy(range(s1, SMALL), range(s2, SMALL))
        .map_err(fail("compute copy"))?;
    lanes::of(front.as_ref())
        .transfer_after(c)
        .map_err(fail("transfer_after"))?;
    let mut t = TransferTicket::DONE;
    for _ in 0..4 {
        t = lanes::of(front.as_ref())
            .transfer_copy(range(src, BIG), range(dst, BIG))
            .map_err(fail("long transfer copy"))?;
    }
    lanes::of(front.as_ref())
        .compute_after(t)
        .map_err(fail("compute_after"))?;
    let c = front
        .copy(range(s2, SMALL), range(s1, SMALL))
        .map_err(fail("joined compute copy"))?;
    ctx.mode
        .ticket(front.as_ref(), c)
        .await
        .map_err(fail("wait joined work"))?;
    let after = stall_of(front.as_ref(), "after the wait", measured)?;
    if let (Some(before), Some(after)) = (before, after) {
        check(after > before, || {
            format!("the wait for the copies was not measured: {before:?} then {after:?}")
        })?;
    }
    // More work without a wait for the lane: the total stays or grows, never goes back.
    let c = front
        .copy(range(s1, SMALL), range(s2, SMALL))
        .map_err(fail("compute copy"))?;
    ctx.mode
        .ticket(front.as_ref(), c)
        .await
        .map_err(fail("wait compute copy"))?;
    let later = stall_of(front.as_ref(), "later", measured)?;
    if let (Some(after), Some(later)) = (after, later) {
        check(later >= after, || {
            format!("the stall went back: {after:?} then {later:?}")
        })?;
    }
    for b in blocks {
        front.free_block(b).map_err(fail("free"))?;
    }
    Ok(())
}
