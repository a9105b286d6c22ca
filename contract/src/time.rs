//! The monotonic clock every deadline and timestamp in tensormem reads.
//!
//! Natively this is `std::time::Instant`. On `wasm32-unknown-unknown` std's clock panics ("time not
//! implemented on this platform"), so the browser build uses `web_time::Instant`, which reads
//! `performance.now()` and has the same API. Nothing else changes for the browser.

#[cfg(not(target_arch = "wasm32"))]
pub use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub use web_time::Instant;
