//! The conformance suite: one set of behavioural cases, run against every backend available at run
//! time. A backend that cannot start here is reported as skipped with its reason; the environment
//! variable `TENSORMEM_REQUIRE_BACKENDS` (comma-separated target names or backend names, e.g.
//! `host,vulkan,wgpu`) turns such a skip into a failure.
//!
//! Each backend joins by adding [`Target`]s to [`backends::targets`]; the cases in [`cases`] are
//! written once against the core contract.
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

pub use ctx::Ctx;
#[cfg(not(target_arch = "wasm32"))]
pub use harness::{Outcome, run_suite};

/// A check run after every case of a target; an `Err` fails the case.
pub type AfterCase = fn(&Arc<dyn Backend>) -> std::result::Result<(), String>;

/// One backend configuration the suite runs against.
pub struct Target {
    /// Target name, e.g. `wgpu-staging`.
    pub name: &'static str,
    /// Backend family, e.g. `wgpu` (what `TENSORMEM_REQUIRE_BACKENDS` may name).
    pub backend: &'static str,
    /// Creates a fresh backend, or says why it cannot run here.
    pub create: fn() -> Result<Arc<dyn Backend>>,
    /// Checked after every case (e.g. Vulkan validation messages); an `Err` fails the case.
    pub after_case: Option<AfterCase>,
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
}

/// Builds a [`Case`] from an `async fn(&Ctx) -> CaseResult`, optionally with the reason it is
/// native-only.
macro_rules! case {
    ($name:literal, $f:path) => {
        case!($name, $f, None)
    };
    ($name:literal, $f:path, native_only: $why:literal) => {
        case!($name, $f, Some($why))
    };
    ($name:literal, $f:path, $native_only:expr) => {
        $crate::Case {
            name: $name,
            run: {
                fn run(ctx: &$crate::Ctx) -> $crate::CaseFuture<'_> {
                    Box::pin($f(ctx))
                }
                run
            },
            native_only: $native_only,
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
