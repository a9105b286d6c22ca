//! Managed (unified) memory on every target: where the backend offers it, managed blocks take
//! host writes, kernels, copies and prefetches both ways with every value intact, and a runtime
//! whose device pool is managed computes the reference output; where it does not, the kind is
//! refused with `Unsupported` by the front and by the backend alike.

use std::sync::Arc;

use tensormem::backend::managed::memory_of;
use tensormem::backend::{BlockDesc, BlockRange};
use tensormem::{
    Backend, DType, Error, HostAccess, ManagedMemory, MemoryKind, Op, PoolConfig, Residence,
    RuntimeConfig, Ticket, Validated,
};

use super::{bytes, floats};
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("managed_blocks_prefetch_and_compute", managed_blocks),
        case!("managed_device_pool_runtime", managed_runtime),
    ]
}

fn input(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 - n as f32 / 2.0) * 0.37).collect()
}

fn relu(x: &[f32]) -> Vec<f32> {
    x.iter().map(|v| v.max(0.0)).collect()
}

/// Without managed memory: the front and the backend both answer `Unsupported`.
fn refused(ctx: &Ctx, front: &dyn Backend) -> R {
    let desc = BlockDesc {
        kind: MemoryKind::Managed,
        size: 4096,
        label: "managed",
    };
    for (who, b) in [("front", front), ("backend", ctx.backend.as_ref())] {
        match b.alloc_block(&desc) {
            Err(Error::Unsupported { .. }) => {}
            Ok(block) => {
                let _ = b.free_block(block);
                return Err(format!(
                    "{who} allocated a managed block on a backend without managed memory"
                ));
            }
            Err(other) => return Err(format!("{who}: expected Unsupported, got {other:?}")),
        }
    }
    Ok(())
}

async fn managed_blocks(ctx: &Ctx) -> R {
    let front: Arc<dyn Backend> = Arc::new(Validated::new(ctx.backend.clone()));
    let Some(managed) = front.managed() else {
        return refused(ctx, front.as_ref());
    };
    let support = managed.managed_memory();
    check(support == memory_of(ctx.backend.as_ref()), || {
        format!("the front reports {} managed memory", support.name())
    })?;
    let n = 1024usize;
    let size = n as u64 * 4;
    let align = front.capabilities().binding_align.max(4);
    let stride = size.div_ceil(align) * align;
    let m = front
        .alloc_block(&BlockDesc {
            kind: MemoryKind::Managed,
            size: 3 * stride,
            label: "managed",
        })
        .map_err(fail("alloc managed"))?;
    let r = |i: u64| BlockRange {
        block: m,
        offset: i * stride,
        size,
    };
    let x = input(n);
    ctx.mode
        .host_access(front.as_ref(), m, HostAccess::Write)
        .await
        .map_err(fail("host access"))?;
    front
        .write_mapped(m, 0, &bytes(&x))
        .map_err(fail("write managed"))?;
    let t = managed
        .prefetch(r(0), Residence::Device)
        .map_err(fail("prefetch to device"))?;
    check(
        (t == Ticket::DONE) == (support == ManagedMemory::SameMemory),
        || {
            format!(
                "prefetch ticket {t:?} with managed memory {}",
                support.name()
            )
        },
    )?;
    front
        .dispatch(&Op::Relu { len: n as u32 }, &[r(0), r(1)])
        .map_err(fail("relu over managed memory"))?;
    // Through device memory and back into the managed block.
    let dev = front
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size,
            label: "device",
        })
        .map_err(fail("alloc device"))?;
    let whole = BlockRange {
        block: dev,
        offset: 0,
        size,
    };
    front.copy(r(1), whole).map_err(fail("copy out"))?;
    front.copy(whole, r(2)).map_err(fail("copy back"))?;
    let t = managed
        .prefetch(
            BlockRange {
                block: m,
                offset: 0,
                size: 3 * stride,
            },
            Residence::Host,
        )
        .map_err(fail("prefetch to host"))?;
    let last = front.flush().map_err(fail("flush"))?.max(t);
    ctx.mode
        .ticket(front.as_ref(), last)
        .await
        .map_err(fail("wait"))?;
    ctx.mode
        .host_access(front.as_ref(), m, HostAccess::Read)
        .await
        .map_err(fail("host access"))?;
    let want = relu(&x);
    for (i, what) in [(1, "relu output"), (2, "copied through device memory")] {
        let mut out = vec![0u8; size as usize];
        front
            .read_mapped(m, i * stride, &mut out)
            .map_err(fail("read managed"))?;
        check(floats(&out) == want, || format!("{what} differs"))?;
    }
    let mut out = vec![0u8; size as usize];
    front.read_mapped(m, 0, &mut out).map_err(fail("read"))?;
    check(floats(&out) == x, || "the input changed".into())?;
    // A prefetch names managed memory.
    match managed.prefetch(whole, Residence::Device) {
        Err(Error::WrongMemoryKind {
            role: "prefetch", ..
        }) => {}
        other => return Err(format!("prefetch of device memory: {other:?}")),
    }
    front.free_block(dev).map_err(fail("free"))?;
    front.free_block(m).map_err(fail("free"))
}

async fn managed_runtime(ctx: &Ctx) -> R {
    let config = RuntimeConfig {
        device: PoolConfig {
            kind: MemoryKind::Managed,
            ..PoolConfig::device()
        },
        ..RuntimeConfig::default()
    };
    let n = 100_000usize;
    let x = input(n);
    if ctx.backend.managed().is_none() {
        let rt = match ctx.runtime(config) {
            Err(Error::Unsupported { .. }) => return Ok(()),
            other => other.map_err(fail("runtime"))?,
        };
        return match ctx.tensor_from(&rt, DType::F32, &[n], &x, "x").await {
            Err(Error::Unsupported { .. }) => Ok(()),
            Ok(_) => Err("a managed device pool allocated without managed memory".into()),
            Err(other) => Err(format!("expected Unsupported, got {other:?}")),
        };
    }
    let rt = ctx.runtime(config).map_err(fail("runtime"))?;
    let xt = ctx
        .tensor_from(&rt, DType::F32, &[n], &x, "x")
        .await
        .map_err(fail("upload"))?;
    let yt = rt.alloc(DType::F32, &[n], "y").map_err(fail("alloc"))?;
    rt.prefetch(&xt, Residence::Device)
        .map_err(fail("prefetch x"))?;
    rt.dispatch(&Op::Relu { len: n as u32 }, &[&xt], &[&yt])
        .map_err(fail("relu"))?;
    rt.prefetch(&yt, Residence::Host)
        .map_err(fail("prefetch y"))?;
    let got: Vec<f32> = ctx.download(&rt, &yt).await.map_err(fail("download"))?;
    check(got == relu(&x), || {
        "relu over a managed pool differs".into()
    })?;
    rt.free(xt).map_err(fail("free"))?;
    rt.free(yt).map_err(fail("free"))
}
