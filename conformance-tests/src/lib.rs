//! The conformance suite: one set of behavioural cases, run against every backend available at run
//! time. A backend that cannot start here is reported as skipped with its reason; the environment
//! variable `TENSORMEM_REQUIRE_BACKENDS` (comma-separated target names or backend names, e.g.
//! `host,vulkan,wgpu`) turns such a skip into a failure.
//!
//! Each backend joins by adding [`Target`]s to [`backends::targets`]; the cases in [`cases`] are
//! written once against the core contract.

use std::sync::Arc;

use tensormem::{Backend, Result};

pub mod backends;
pub mod cases;
mod harness;
pub mod inject;

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

/// One behavioural case.
pub struct Case {
    /// Name printed in the report.
    pub name: &'static str,
    /// Runs the case against a fresh backend of the target.
    pub run: fn(&Ctx) -> std::result::Result<(), String>,
}

/// What a case gets: a backend, and a way to make more of the same target (for cases that need a
/// pristine device or several runtimes).
pub struct Ctx {
    /// A fresh backend of the target.
    pub backend: Arc<dyn Backend>,
    /// The target's factory.
    pub create: fn() -> Result<Arc<dyn Backend>>,
}

/// Turns a `tensormem::Error` into the case failure string, keeping the message.
pub fn fail(context: &str) -> impl Fn(tensormem::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// Fails with `msg` unless `cond` holds.
pub fn check(cond: bool, msg: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}
