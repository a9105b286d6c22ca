//! The arena pool's configuration: its knobs, each with its default and what it changes.

use std::time::Duration;

use super::{Carver, DEFAULT_BLOCK_SIZE};
use crate::backend::MemoryKind;

/// Default of [`ArenaConfig::idle_release`]: 10 s.
pub const DEFAULT_IDLE_RELEASE: Duration = Duration::from_secs(10);

/// Configuration of an [`ArenaPool`](super::ArenaPool).
#[derive(Clone, Debug)]
pub struct ArenaConfig {
    /// Name used in reports and errors ("device", "host-visible", ...).
    pub name: String,
    /// Memory kind of the pool's blocks.
    pub kind: MemoryKind,
    /// Largest block the small class (requests up to 1 MiB) grows by, in bytes (default 32 MiB,
    /// clamped to the device's largest block); also the coarsest rounding of block sizes. Blocks
    /// are otherwise sized by the workload (`policy`): bigger means fewer driver calls for
    /// many small tensors, and more memory held idle.
    pub block_size: u64,
    /// Hard limit on reserved bytes (default: the backend's reported budget for device memory, else
    /// none). The pool never reserves more, whatever it costs in failed allocations. A pool built
    /// on a runtime's shared [`Budget`](crate::pool::Budget) ([`ArenaPool::with_budget`](super::ArenaPool::with_budget)) is limited by that instead.
    pub budget: Option<u64>,
    /// Grow one arena in place where the backend can ([`Extensions::growable`](crate::backend::Extensions::growable)(crate::Backend::growable)); default
    /// `true`. `false` always adds blocks (the fallback path, for tests and comparisons).
    pub in_place: bool,
    /// On the arena that grows in place, give the memory of free holes back and move it where
    /// tensors need it, where the backend offers holes ([`InPlaceGrowth::holes`](crate::InPlaceGrowth::holes); see
    /// `holes`); default `true`. `false` keeps every byte of the arena committed until a
    /// trim returns its free tail (fewer driver calls, more memory held).
    pub holes: bool,
    /// On the arena with holes, place a request where its allocation site (its size and the
    /// pool's last few events) went last time, when that range is free again (`sites`);
    /// default `true`. A repeated step then finds its granules committed and moves no memory;
    /// `false` leaves placement to TLSF alone (for comparisons).
    pub learned_placement: bool,
    /// A block that has been empty this long is returned to the backend at the pool's next miss
    /// (a request that fits no block), before the pool grows; default 10 s, `None` never (only
    /// trim and the pressure path release). There is no timer thread: an idle pool that is not
    /// asked for memory keeps its blocks until a trim or another pool's pressure. Shorter means
    /// less memory held between bursts and more driver calls when the bursts repeat.
    pub idle_release: Option<Duration>,
    /// The sub-allocator that carves the blocks; default [`Carver::Tlsf`]. [`Carver::Buddy`]
    /// turns in-place growth off (the pool adds blocks) and holds each request in the next power
    /// of two: more memory for arbitrary sizes, none lost for power-of-two ones.
    pub carver: Carver,
}

impl ArenaConfig {
    /// The default device arena configuration.
    pub fn device() -> Self {
        ArenaConfig {
            name: "device".into(),
            kind: MemoryKind::DeviceLocal,
            block_size: DEFAULT_BLOCK_SIZE,
            budget: None,
            in_place: true,
            holes: true,
            learned_placement: true,
            idle_release: Some(DEFAULT_IDLE_RELEASE),
            carver: Carver::Tlsf,
        }
    }

    /// The default configuration of a host-visible pool of `kind` (`Upload` or `Readback`).
    pub fn host_visible(kind: MemoryKind) -> Self {
        ArenaConfig {
            name: format!("host-visible ({})", kind.name()),
            kind,
            block_size: 8 << 20,
            ..ArenaConfig::device()
        }
    }
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig::device()
    }
}
