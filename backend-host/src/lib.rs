//! # tensormem-host
//!
//! The host CPU backend of tensormem, a backend crate beside CUDA, Vulkan and wgpu: the embedded
//! default on machines without a GPU, and the numerical reference every other backend is checked
//! against.
//!
//! - [`HostBackend`] implements the [`Backend`](tensormem_contract::Backend) contract over host
//!   memory: blocks that grow in place (reserve and commit), decommitted holes, a worker thread
//!   per lane so tickets complete asynchronously as on a GPU queue (`host`).
//! - [`kernels`]: the standard op set on the CPU (packed SIMD GEMM, a dot-product kernel for
//!   skinny products, fused quantized weights, row ops, attention over the paged KV cache).
//! - [`numa`]: the machine's NUMA topology and the placement of host blocks near a device.
//! - `samples` (feature `test-support`): op instances, inputs and the comparison rule the
//!   conformance suite and the backends' op tests share.
//!
//! The crate depends on the contract (`tensormem-contract`) only, never on the runtime;
//! `tensormem` re-exports it as `tensormem::host`, `tensormem::numa` and `tensormem::ops::host`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod host;
pub mod kernels;
pub mod numa;
#[cfg(any(test, feature = "test-support"))]
pub mod samples;

pub use host::{HostBackend, HostConfig};

// The contract at the paths this crate's modules name it by.
pub(crate) use tensormem_contract::{ArgumentError, Error, OomReport, Result, backend, ops, time};
