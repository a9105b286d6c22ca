//! The two rates the offload planner's cost model reads: the link's bandwidth (a swap costs its
//! bytes over it, out and back) and the device's rate (a re-run costs the bytes its op binds over
//! it), as [`CompileDesc::rates`](super::CompileDesc::rates) asks: the planner's defaults, given
//! numbers, or measured on the runtime's backend.
//!
//! The measurement is one copy of [`PROBE_BYTES`] from upload to device memory and one
//! elementwise add over three device ranges of a third of that each, timed from enqueue to
//! completion after one warm-up of each; it runs the first time a runtime asks and is kept for the
//! runtime's life, so every later compile on it plans with the same numbers. Measured numbers
//! move with the machine's load, so tests pass rates explicitly (or keep the defaults).

use std::sync::Arc;

use crate::backend::Backend;
use crate::offload::OffloadDesc;
use crate::runtime::Runtime;
use crate::{Error, Result};

/// Bytes the measurement copies (and the add binds).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub const PROBE_BYTES: u64 = 12 << 20;

/// Where the planner's two rates come from.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum Rates {
    /// The planner's defaults ([`OffloadDesc::new`]): deterministic.
    #[default]
    Default,
    /// These, in bytes per second.
    Given {
        /// Link bandwidth.
        link: f64,
        /// Device rate: bytes an op binds per second.
        device: f64,
    },
    /// Measured once per runtime on its backend (module doc).
    Measured,
}

impl Rates {
    /// The (link, device) rates in bytes per second for a compile on `rt`.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError) for a rate that is not a finite number
    /// above 0; the backend's errors while measuring.
    pub(super) fn resolve(self, rt: &Runtime) -> Result<(f64, f64)> {
        match self {
            Rates::Default => {
                let d = OffloadDesc::new(0, 1);
                Ok((d.link_bandwidth, d.device_bandwidth))
            }
            Rates::Given { link, device } => {
                if [link, device].iter().all(|r| r.is_finite() && *r > 0.0) {
                    Ok((link, device))
                } else {
                    Err(crate::ArgumentError::invalid_value(
                        "offload rates (bytes/s)",
                        format!("link {link}, device {device}"),
                        "both finite and above 0",
                    )
                    .into())
                }
            }
            Rates::Measured => rt.measured_rates(|| measure(rt.backend())),
        }
    }
}

/// No measurement on wasm32: it needs blocking waits (the defaults or given rates plan there).
#[cfg(target_arch = "wasm32")]
fn measure(backend: &Arc<dyn Backend>) -> Result<(f64, f64)> {
    Err(Error::Unsupported {
        backend: backend.capabilities().backend,
        what: "measuring offload rates (blocking waits) on wasm32".into(),
    })
}

/// Measures (link, device) rates on `backend` (module doc).
#[cfg(not(target_arch = "wasm32"))]
fn measure(backend: &Arc<dyn Backend>) -> Result<(f64, f64)> {
    use crate::backend::{BlockDesc, BlockRange, MemoryKind};
    use crate::ops::Op;
    use crate::time::Instant;

    let b = backend.as_ref();
    let align = b.capabilities().copy_align.max(4);
    let third = (PROBE_BYTES / 3).next_multiple_of(align);
    let alloc = |kind, size| {
        b.alloc_block(&BlockDesc {
            kind,
            size,
            label: "offload rate probe",
        })
    };
    let src = alloc(MemoryKind::Upload, PROBE_BYTES)?;
    let dst = match alloc(MemoryKind::DeviceLocal, PROBE_BYTES) {
        Ok(d) => d,
        Err(e) => {
            b.free_block(src)?;
            return Err(e);
        }
    };
    let range = |block, offset, size| BlockRange {
        block,
        offset,
        size,
    };
    let timed = |f: &dyn Fn() -> Result<crate::backend::Ticket>| -> Result<f64> {
        b.wait(f()?)?; // warm-up
        let start = Instant::now();
        b.wait(f()?)?;
        Ok(start.elapsed().as_secs_f64().max(1e-9))
    };
    let result = (|| -> Result<(f64, f64)> {
        let copy = timed(&|| b.copy(range(src, 0, PROBE_BYTES), range(dst, 0, PROBE_BYTES)))?;
        let len = u32::try_from(third / 4).map_err(|_| Error::ArithmeticOverflow {
            what: format!("rate probe of {} elements", third / 4),
            limit_name: "u32 kernel index",
        })?;
        let add = Op::Add { len, b_len: len };
        let bindings = [
            range(dst, 0, third),
            range(dst, third, third),
            range(dst, 2 * third, third),
        ];
        let op = timed(&|| b.dispatch(&add, &bindings))?;
        Ok((PROBE_BYTES as f64 / copy, (3 * third) as f64 / op))
    })();
    let freed = b.free_block(src).and(b.free_block(dst));
    let rates = result?;
    freed.map(|()| rates)
}
