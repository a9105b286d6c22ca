//! The conformance suite: one set of behavioural cases, run against every backend available at run
//! time. A backend that cannot start here is reported as skipped with its reason; the environment
//! variable `TENSORMEM_REQUIRE_BACKENDS` (comma-separated target names or backend names, e.g.
//! `host,vulkan,wgpu`) turns such a skip into a failure.
//!
//! Each backend joins by adding [`Target`]s to [`backends::targets`]; the cases in [`cases`] are
//! written once against the core contract.
//!
//! **Two-device targets** ([`Target::second`]) pair two backends in one process. Every case runs
//! on both devices at once, one thread each, each through device 1 of a device set
//! ([`Ctx::runtime`]): per-device pools, budgets and staging belts must hold while another device
//! works. The cases about device sets themselves (mixed-device errors, cross-device copies, split
//! models; [`Case::devices`] 2) run only there, once per completion mode, over both devices.
//!
//! Every case is an `async fn` that waits only through [`Ctx`]'s helpers, so the same case body
//! runs in both completion modes (see `tensormem::Waiting`): natively each case runs once with the
//! blocking forms and once with the awaitable forms; in a browser (`wasm32`, where blocking forms do
//! not exist) with the awaitable forms only, driven by the browser's event loop (crate
//! `tensormem-browser`). Cases that cannot run in a browser say why in [`Case::native_only`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tensormem::{Backend, Result};

#[cfg(not(target_arch = "wasm32"))]
pub mod backends;
pub mod cases;
mod ctx;
#[cfg(not(target_arch = "wasm32"))]
mod harness;
pub mod inject;
#[cfg(not(target_arch = "wasm32"))]
pub mod spill_stress;

pub use ctx::Ctx;
#[cfg(not(target_arch = "wasm32"))]
pub use harness::{Outcome, in_parallel, run_suite};

/// Creates a fresh backend of a target, or says why it cannot run here.
pub type CreateBackend = fn() -> Result<Arc<dyn Backend>>;

/// A check run after every case of a target; an `Err` fails the case.
pub type AfterCase = fn(&Arc<dyn Backend>) -> std::result::Result<(), String>;

/// One backend configuration the suite runs against.
pub struct Target {
    /// Target name, e.g. `wgpu-staging`.
    pub name: &'static str,
    /// Backend family, e.g. `wgpu` (what `TENSORMEM_REQUIRE_BACKENDS` may name).
    pub backend: &'static str,
    /// Creates a fresh backend, or says why it cannot run here.
    pub create: CreateBackend,
    /// Checked after every case (e.g. Vulkan validation messages); an `Err` fails the case.
    pub after_case: Option<AfterCase>,
    /// On a two-device target, creates the second device (`create` makes the first); `None` for
    /// one device.
    pub second: Option<CreateBackend>,
    /// Run only the device-set cases ([`Case::devices`] 2): for a mixed pair whose backends'
    /// one-device cases already run on their own two-device targets.
    pub set_cases_only: bool,
}

/// What a case returns: `Err` with the failure message.
pub type CaseResult = std::result::Result<(), String>;

/// The future of one case run, borrowing its [`Ctx`].
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + 'a>>;

/// One behavioural case.
pub struct Case {
    /// Name printed in the report.
    pub name: &'static str,
    /// Runs the case against a fresh backend of the target.
    pub run: fn(&Ctx) -> CaseFuture<'_>,
    /// Why the case cannot run in a browser (`None`: it runs there too).
    pub native_only: Option<&'static str>,
    /// Devices the case needs: 1 (every target; on a two-device target, run on each device at
    /// once) or 2 (two-device targets only, with [`Ctx::peer`] set).
    pub devices: usize,
}

/// Builds a [`Case`] from an `async fn(&Ctx) -> CaseResult`, optionally with the reason it is
/// native-only, or `two_devices` for a case that needs a two-device target.
macro_rules! case {
    ($name:literal, $f:path) => {
        case!($name, $f, None, 1)
    };
    ($name:literal, $f:path, native_only: $why:literal) => {
        case!($name, $f, Some($why), 1)
    };
    ($name:literal, $f:path, two_devices) => {
        case!($name, $f, Some("needs a two-device target"), 2)
    };
    ($name:literal, $f:path, $native_only:expr, $devices:literal) => {
        $crate::Case {
            name: $name,
            run: {
                fn run(ctx: &$crate::Ctx) -> $crate::CaseFuture<'_> {
                    Box::pin($f(ctx))
                }
                run
            },
            native_only: $native_only,
            devices: $devices,
        }
    };
}
pub(crate) use case;

/// Turns a `tensormem::Error` into the case failure string, keeping the message.
pub fn fail(context: &str) -> impl Fn(tensormem::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// Fails with `msg` unless `cond` holds.
pub fn check(cond: bool, msg: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}
