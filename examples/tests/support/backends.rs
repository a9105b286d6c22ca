//! The backends a test runs on: every one `backend_select` can start here, each reported as run or
//! skipped (with the reason), never passing silently.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::sync::Arc;

use tensormem::{Backend, Runtime, RuntimeConfig};
use tensormem_examples::backend_select::{self, BackendChoice, SelectOptions};

/// Backends the samples accept by name, besides `auto`.
pub const NAMES: [(&str, BackendChoice); 4] = [
    ("host", BackendChoice::Host),
    ("vulkan", BackendChoice::Vulkan),
    ("wgpu", BackendChoice::Wgpu),
    ("cuda", BackendChoice::Cuda),
];

/// A runtime on every backend available here, with its name. Prints one line per backend that is
/// skipped. Host must always be available.
pub fn available_runtimes() -> Vec<(&'static str, Runtime)> {
    let mut out = Vec::new();
    for (name, choice) in NAMES {
        let backend: Arc<dyn Backend> =
            match backend_select::select(choice, &SelectOptions::default()) {
                Ok(s) => s.backend,
                Err(e) => {
                    println!("SKIP backend {name}: {e}");
                    continue;
                }
            };
        let actual = backend.capabilities().backend;
        if actual != name {
            println!("SKIP backend {name}: selection fell back to {actual}");
            continue;
        }
        match Runtime::new(backend, RuntimeConfig::default()) {
            Ok(rt) => out.push((name, rt)),
            Err(e) => println!("SKIP backend {name}: runtime: {e}"),
        }
    }
    assert!(
        out.iter().any(|(n, _)| *n == "host"),
        "the host backend must always be available"
    );
    out
}
