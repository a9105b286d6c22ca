//! # tensormem-plan
//!
//! The pure half of tensormem: algorithms over byte ranges and lifetimes that never touch a
//! device, a runtime or memory they manage. The runtime (`tensormem`) depends on this crate and
//! re-exports its modules at the same paths (`tensormem::plan`, `tensormem::suballoc`,
//! `tensormem::offload`, `tensormem::align`); this crate depends on nothing of tensormem's.
//!
//! * [`suballoc`]: offset sub-allocators over `[0, capacity)` (TLSF, buddy, linear, ring) with
//!   out-of-band metadata and generational, move-only handles. The pools carve device blocks with
//!   them.
//! * [`plan`]: liveness analysis and static memory planning: lower bound, greedy baselines, the
//!   exact-and-heuristic portfolio solver, the verifier, record-and-replay, MiniMalloc's CSV
//!   format and the perfect-packing and random-lifetime generators.
//! * [`offload`]: offload schedules (which tensors leave the device when, swapped or recomputed)
//!   under a device budget, placed by the planner. The runtime's offloaded model executes them.
//! * [`align`]: the one power-of-two rounding helper every crate shares.
//!
//! Every refusal is an [`Error`] (one typed variant per rule, no panics on bad input). The runtime
//! converts it into its own error variant of the same name and fields, so a caller of
//! `tensormem::plan` sees the errors it always saw.
//!
//! The crate forbids `unsafe` code; its only dependencies are `thiserror`, `bytemuck` (zeroed
//! vectors) and, in the browser build, `web-time` for the planners' deadlines.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod align;
mod error;
pub mod offload;
pub mod plan;
pub mod suballoc;
mod time;

pub use error::{ArgumentError, Error, Result};
