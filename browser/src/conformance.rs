//! The conformance suite's cases on the browser's WebGPU: each case runs, in the awaitable mode,
//! on two targets. WebGPU never maps storage buffers, so both stage; `webgpu` sends small uploads
//! through `queue.writeBuffer` as the backend does by default, `webgpu-belt` sends every upload
//! through the runtime's mapped staging belt (`mapAsync` for writing, awaited).

use std::sync::Arc;

use tensormem::{Backend, Waiting};
use tensormem_conformance::{Case, Ctx, cases};
use tensormem_wgpu::{WgpuBackend, WgpuConfig};

/// The browser targets: name and whether every upload goes through the mapped belt.
pub const TARGETS: [(&str, bool); 2] = [("webgpu", false), ("webgpu-belt", true)];

/// A wgpu backend on the browser's WebGPU adapter; with `belt_only`, `queue.writeBuffer` is never
/// used for uploads (`queued_write_max` 0).
///
/// # Errors
/// The backend's message, e.g. "no adapter" when the browser has no WebGPU.
pub async fn webgpu(belt_only: bool) -> Result<Arc<dyn Backend>, String> {
    let mut config = WgpuConfig::staging(true);
    if belt_only {
        config.queued_write_max = 0;
    }
    WgpuBackend::new_async(config)
        .await
        .map(|b| Arc::new(b) as Arc<dyn Backend>)
        .map_err(|e| e.to_string())
}

/// The cases that run in a browser (those without a `native_only` reason).
pub fn browser_cases() -> Vec<Case> {
    cases::all()
        .into_iter()
        .filter(|c| c.native_only.is_none())
        .collect()
}

/// Runs the case named `name` on every browser target, each with a fresh backend.
///
/// # Errors
/// Every target's failure, prefixed with the target name; an unknown or native-only case name.
pub async fn run(name: &str) -> Result<(), String> {
    let case = browser_cases()
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("no browser case named {name}"))?;
    let mut failures = Vec::new();
    for (target, belt_only) in TARGETS {
        let ctx = Ctx {
            backend: webgpu(belt_only).await?,
            peer: None,
            mode: Waiting::Async,
        };
        if let Err(e) = (case.run)(&ctx).await {
            failures.push(format!("{target}: {e}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
