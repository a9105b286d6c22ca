//! The monotonic clock the planners' deadlines read.
//!
//! Natively this is `std::time::Instant`. On `wasm32-unknown-unknown` std's clock panics ("time not
//! implemented on this platform"), so the browser build uses `web_time::Instant`, which reads
//! `performance.now()` and has the same API.

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub(crate) use web_time::Instant;
