//! Pools: blocks from a backend, sub-allocated in core, recycled by tickets.
//!
//! Every pool implements one small trait, [`DevicePool`] (RMM's `device_memory_resource` is the
//! model), and every feature is an adaptor around a pool, so features compose and cost nothing
//! when left out:
//!
//! * bottoms — [`ArenaPool`] (TLSF or buddy carving and growth, for every memory kind: the
//!   fallback composition of a growing arena, a block pool and expandable allocations over one
//!   shared carver),
//!   [`ReplayPool`] (record and replay of a repeating allocation sequence), or a user's own pool;
//! * adaptors ([`PoolAdaptor`]: each writes only what it changes) — [`Guarded`] (guard margins),
//!   [`ZeroOnReuse`], [`StatsPool`] (statistics), [`LeakReport`], [`Traced`];
//! * [`Expandable`] — the optional capability of allocations that grow in place, each in a
//!   reservation of its own ([`DevicePool::expandable`]);
//! * [`PoolConfig`] builds the stack a runtime uses ([`PoolStack`]);
//! * [`Budget`] — the device-memory account shared by a runtime's pools, and its one pressure
//!   path: a pool that cannot grow makes every pool of the runtime release its idle blocks first;
//! * [`StagingBelt`] — uploads and readbacks through host-visible rings, chunked, trimmed when
//!   idle, and released under pressure.
//!
//! Handles carry a generation ([`Handle`]): a double free or a use after free is an error, never
//! undefined behaviour. Every pool is `Send + Sync`.

mod arena;
mod budget;
mod deferred;
mod device_pool;
mod expandable;
mod guard;
mod leaks;
mod replay;
mod slots;
#[cfg(not(target_arch = "wasm32"))]
mod spill;
mod stack;
mod staging;
mod stats;
mod tracing;
mod zeroing;

pub use arena::{
    ArenaConfig, ArenaPool, Carver, DEFAULT_BLOCK_SIZE, DEFAULT_IDLE_RELEASE, MAX_ALIGN,
};
pub use budget::{Budget, MemberId, Reclaim};
pub(crate) use device_pool::Lease;
pub use device_pool::{
    Allocation, DevicePool, LiveAllocation, PoolAdaptor, PoolListener, PoolStats,
};
pub use expandable::{Expandable, ExpandableDesc};
pub use guard::{GUARD_PATTERN, Guarded};
pub use leaks::LeakReport;
pub(crate) use leaks::check as check_leaks;
pub use replay::{ReplayConfig, ReplayPool, ReplayStats};
pub use slots::Handle;
#[cfg(not(target_arch = "wasm32"))]
pub use spill::{SpillConfig, SpillPool, SpillStats};
pub use stack::{PoolConfig, PoolStack};
pub use staging::{StagingBelt, StagingConfig, StagingStats};
pub use stats::{AllocationStats, StatsPool};
pub use tracing::{TraceIds, Traced};
pub use zeroing::ZeroOnReuse;
