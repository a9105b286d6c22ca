//! Pools: blocks from a backend, sub-allocated in core, recycled by tickets.
//!
//! * [`ArenaPool`] — the device arena pool (and, with an `Upload`/`Readback` kind, the host-visible
//!   pool): TLSF inside blocks, growth, trim, budget, deferred frees, an explaining OOM path.
//! * [`StagingBelt`] — uploads and readbacks through host-visible rings, chunked, trimmed when idle.
//!
//! Handles carry a generation ([`Handle`]): a double free or a use after free is an error, never
//! undefined behaviour. Every pool is `Send + Sync`.

mod arena;
mod deferred;
mod guard;
mod replay;
mod slots;
mod staging;

pub use arena::{Allocation, ArenaPool, DEFAULT_BLOCK_SIZE, MAX_ALIGN, PoolConfig, PoolStats};
pub use guard::GUARD_PATTERN;
pub use replay::{ReplayAllocation, ReplayPool, ReplayStats};
pub use slots::Handle;
pub use staging::{StagingBelt, StagingConfig, StagingStats};
