//! Wait limits (issue 18): a blocking wait bounded by `Backend::wait_timeout` either completes or
//! fails with a typed, retryable `Error::Timeout` that loses nothing, and finished work never
//! times out. Native only: `wasm32` has no blocking waits, so this module is not compiled there.

use std::time::Duration;

use tensormem::{DType, Error, Op, Runtime, RuntimeConfig, Ticket};

use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![case!(
        "wait_limits",
        wait_limits,
        native_only: "blocking waits do not exist on wasm32"
    )]
}

async fn wait_limits(ctx: &Ctx) -> R {
    const LEN: usize = 1 << 20;
    const STEPS: usize = 8;
    let rt =
        Runtime::new(ctx.backend.clone(), RuntimeConfig::default()).map_err(fail("runtime"))?;
    let data: Vec<f32> = (0..LEN).map(|i| (i % 1000) as f32).collect();
    let mut t = ctx
        .tensor_from(&rt, DType::F32, &[LEN], &data, "x")
        .await
        .map_err(fail("upload"))?;
    // A chain of 4 MiB kernels, so that a zero limit usually finds the work still running.
    for step in 0..STEPS {
        let next = rt.alloc(DType::F32, &[LEN], "y").map_err(fail("alloc"))?;
        rt.dispatch(
            &Op::Scale {
                len: LEN as u32,
                alpha: 2.0,
            },
            &[&t],
            &[&next],
        )
        .map_err(fail(&format!("scale {step}")))?;
        rt.free(std::mem::replace(&mut t, next))
            .map_err(fail("free"))?;
    }
    let b = rt.backend();
    let ticket = b.flush().map_err(fail("flush"))?;
    match b.wait_timeout(ticket, Some(Duration::ZERO)) {
        Ok(()) => {}
        Err(e @ Error::Timeout { .. }) => {
            check(e.is_retryable() && !e.is_fatal(), || {
                format!("a timeout must be retryable, not fatal: {e}")
            })?;
        }
        Err(e) => return Err(format!("a zero limit gave neither Ok nor a timeout: {e}")),
    }
    b.wait_timeout(ticket, Some(Duration::MAX))
        .map_err(fail("the same ticket without a limit"))?;
    b.wait_timeout(ticket, Some(Duration::ZERO))
        .map_err(fail("finished work with a zero limit"))?;
    let got: Vec<f32> = ctx.download(&rt, &t).await.map_err(fail("download"))?;
    let scale = (1u32 << STEPS) as f32;
    check(got.iter().zip(&data).all(|(g, d)| *g == d * scale), || {
        "the timed-out work lost or changed its result".into()
    })?;
    match b.wait_timeout(Ticket(ticket.0 + 1000), Some(Duration::ZERO)) {
        Err(Error::UnknownTicket { .. }) => {}
        other => return Err(format!("an unissued ticket with a zero limit: {other:?}")),
    }
    rt.free(t).map_err(fail("free"))
}
