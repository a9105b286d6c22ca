//! The backends a test runs on: every one `backend_select` can start here, each reported as run or
//! skipped (with the reason), never passing silently.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::sync::Arc;
use std::time::Duration;

use tensormem::{Backend, Runtime, RuntimeConfig};
use tensormem_examples::backend_select::{self, BackendChoice, SelectOptions};

/// Backends the samples accept by name, besides `auto`.
pub const NAMES: [(&str, BackendChoice); 4] = [
    ("host", BackendChoice::Host),
    ("vulkan", BackendChoice::Vulkan),
    ("wgpu", BackendChoice::Wgpu),
    ("cuda", BackendChoice::Cuda),
];

/// The Vulkan and wgpu backends' wait limit in these tests, past their 60 s default: lavapipe
/// compiles a kernel on its first wait, and on a cold shader cache beside a loaded build one took
/// longer than 60 s (MiniLM's chunked attention, `vkWaitSemaphores`, 2026-12-02). A hang still
/// fails, later.
const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// A runtime on every backend available here, with its name. Prints one line per backend that is
/// skipped. Host must always be available.
pub fn available_runtimes() -> Vec<(&'static str, Runtime)> {
    let mut out = Vec::new();
    let options = SelectOptions {
        wait_timeout: Some(WAIT_LIMIT),
    };
    for (name, choice) in NAMES {
        let backend: Arc<dyn Backend> = match backend_select::select(choice, &options) {
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
