//! The cases, written once against the core contract.

use tensormem::{Runtime, RuntimeConfig};

use crate::{Case, CaseResult, Ctx, fail};

/// The shared deterministic generator, so failures replay.
pub(crate) use tensormem::ops::samples::Rng;

/// `v` as little-endian bytes.
pub(crate) fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian `b` as floats.
pub(crate) fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs `f(i)` for each `i` below `n`, each on a thread of its own, all at once; the first
/// failure in `i` order (a panic is one).
pub(crate) fn on_threads(n: u32, f: impl Fn(u32) -> CaseResult + Sync) -> CaseResult {
    let results: Vec<CaseResult> = std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..n).map(|i| s.spawn(move || f(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    results.into_iter().collect()
}

/// The context's runtime, configured by default.
pub(crate) fn runtime(ctx: &Ctx) -> Result<Runtime, String> {
    ctx.runtime(RuntimeConfig::default())
        .map_err(fail("runtime"))
}

/// The context's runtime, configured by default but for `force_staging`.
pub(crate) fn staged_runtime(ctx: &Ctx, force_staging: bool) -> Result<Runtime, String> {
    ctx.runtime(RuntimeConfig {
        force_staging,
        ..RuntimeConfig::default()
    })
    .map_err(fail("runtime"))
}

#[cfg(not(target_arch = "wasm32"))]
mod devices;
mod graphs;
mod growth;
#[cfg(not(target_arch = "wasm32"))]
mod kv;
mod lanes;
mod managed;
mod memory;
mod misuse;
#[cfg(not(target_arch = "wasm32"))]
mod misuse_serving;
mod offload;
mod ops;
mod pools;
mod replay;
mod segments;
#[cfg(not(target_arch = "wasm32"))]
mod spill;
mod staging;
mod stall;
mod swap_order;
mod tiling;
#[cfg(not(target_arch = "wasm32"))]
mod waits;

/// Every case, in report order.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(memory::cases());
    v.extend(pools::cases());
    v.extend(replay::cases());
    v.extend(growth::cases());
    v.extend(managed::cases());
    v.extend(lanes::cases());
    v.extend(stall::cases());
    v.extend(staging::cases());
    v.extend(ops::cases());
    v.extend(segments::cases());
    v.extend(graphs::cases());
    v.extend(offload::cases());
    v.extend(swap_order::cases());
    v.extend(tiling::cases());
    #[cfg(not(target_arch = "wasm32"))]
    v.extend(spill::cases());
    #[cfg(not(target_arch = "wasm32"))]
    v.extend(kv::cases());
    v.extend(misuse::cases());
    #[cfg(not(target_arch = "wasm32"))]
    v.extend(misuse_serving::cases());
    #[cfg(not(target_arch = "wasm32"))]
    v.extend(waits::cases());
    #[cfg(not(target_arch = "wasm32"))]
    v.extend(devices::cases());
    v
}
