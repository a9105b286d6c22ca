//! The arena pool: the bottom of every pool stack, composed of bottom pools that each carve
//! backend blocks with TLSF (or buddy: [`ArenaConfig::carver`]) over one shared carver
//! ([`carved`]), with ticket-deferred frees and an out-of-memory error that explains itself.
//! Guard margins, zero-on-reuse, tracing and leak reports are adaptors around it
//! ([`crate::pool`]). One type serves every memory kind: device memory, and with `Upload` or
//! `Readback` the host-visible (pinned) pool for host tensors that take part in transfers.
//!
//! # Two bottom pools and a fallback
//! * **The growing arena** ([`GrowingArena`], [`growing`]), where the backend grows blocks in
//!   place ([`Extensions::growable`](crate::backend::Extensions::growable): CUDA's virtual
//!   memory, the host's reserve-and-commit): one reservation whose committed size follows the
//!   live set, with holes ([`holes`]) and learned placement ([`sites`]).
//! * **The block pool** ([`BlockPool`], [`growth`]): blocks beside each other, by request class,
//!   sized by the request stream ([`policy`]). Alone where blocks cannot grow (Vulkan without
//!   sparse binding, wgpu) or `in_place` is off; beside the arena when its reservation is full or
//!   the backend refuses its growth.
//! * **Expandable allocations** ([`expandable`]): one reservation per allocation, grown in place.
//!
//! [`ArenaPool`] composes them as a fallback ([`compose`]): a request goes to the first pool
//! with room at each stage (existing blocks after reclaiming completed frees; waiting for
//! pending frees where growing would pass the allowance, [`pending`]; growing), every pool
//! before the next stage; frees and queries go to the pool whose handle it is. All of them
//! reserve against one [`Budget`].
//!
//! # Out-of-memory path
//! 1. reclaim completed frees and retry in every pool's blocks; wait for pending frees;
//! 2. grow the arena, else reserve a block (the class's empty blocks returned first), where
//!    the budget allows; when the budget or the driver refuses, trim and retry once;
//! 3. with no lock held, ask every pool of the runtime to release idle blocks
//!    ([`Budget::relieve`]) and retry once more;
//! 4. only then return [`Error::OutOfMemory`] with one report over all bottom pools ([`oom`]).
//!
//! Every failing call leaves the pool as it was.

use std::sync::Arc;

use crate::backend::{Backend, MemoryKind};
use crate::pool::budget::Budget;
use crate::{Error, Result};

mod api;
mod carved;
mod carving;
mod compose;
mod config;
mod expandable;
mod growing;
mod growth;
mod handles;
mod hints;
mod holes;
mod invariants;
mod lifecycle;
mod oom;
mod pending;
mod policy;
mod reservation;
mod sites;
#[cfg(test)]
mod testing;
mod totals;
mod units;

pub use carving::Carver;
pub use config::{ArenaConfig, DEFAULT_IDLE_RELEASE};
pub use growth::DEFAULT_BLOCK_SIZE;

use carved::Carved;
use expandable::Dedicated;
use growing::InPlace;
use growth::Classes;
use totals::Totals;

/// Largest alignment a pool accepts, in bytes (1 GiB).
pub const MAX_ALIGN: u64 = 1 << 30;

/// The block pool: blocks by request class, beside each other.
type BlockPool = Carved<Classes>;
/// The arena that grows in place.
type GrowingArena = Carved<InPlace>;
/// One reservation per expandable allocation.
type ExpandablePool = Carved<Dedicated>;

/// The bottom pools an arena pool composes. (One per arena pool: the variants' sizes do not
/// matter, and boxing would add a pointer to every allocation's path.)
#[allow(clippy::large_enum_variant)]
enum Bottoms {
    /// Blocks alone (no growth in place).
    Blocks(BlockPool),
    /// The growing arena first, blocks when it cannot serve, and expandable allocations.
    InPlace {
        arena: GrowingArena,
        blocks: BlockPool,
        expandables: ExpandablePool,
    },
}

/// A pool of blocks of one memory kind, sub-allocated with TLSF: the composition of the module
/// doc. `Send + Sync`; every method takes `&self` and takes one bottom pool's lock at a time
/// (sub-allocation is tens of nanoseconds).
pub struct ArenaPool {
    config: ArenaConfig,
    budget: Arc<Budget>,
    /// Whether `budget` is shared with other pools (else its reservations are exactly this pool's).
    shared_budget: bool,
    /// The peaks of the bottom pools' sums.
    totals: Arc<Totals>,
    bottoms: Bottoms,
}

impl ArenaPool {
    /// Creates an empty pool with a budget of its own (`config.budget`, else the backend's reported
    /// budget for device memory); no block is reserved until the first allocation.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for a zero block size.
    pub fn new(backend: Arc<dyn Backend>, config: ArenaConfig) -> Result<Self> {
        let limit = match (config.budget, config.kind) {
            (Some(b), _) => Some(b),
            (None, MemoryKind::DeviceLocal | MemoryKind::Managed) => backend.capabilities().budget,
            (None, _) => None,
        };
        Self::build(backend, config, Budget::new(limit), false)
    }

    /// Creates an empty pool whose blocks are reserved against `budget`, shared with the other
    /// pools of a runtime; `config.budget` is not used.
    ///
    /// # Errors
    /// As [`ArenaPool::new`].
    pub fn with_budget(
        backend: Arc<dyn Backend>,
        config: ArenaConfig,
        budget: Arc<Budget>,
    ) -> Result<Self> {
        Self::build(backend, config, budget, true)
    }

    fn build(
        backend: Arc<dyn Backend>,
        mut config: ArenaConfig,
        budget: Arc<Budget>,
        shared_budget: bool,
    ) -> Result<Self> {
        if config.block_size == 0 {
            return Err(Error::ZeroSize { what: "block size" });
        }
        config.block_size = config.block_size.min(backend.capabilities().max_block_size);
        config.budget = budget.limit();
        let growth = backend
            .growable()
            .map(|g| g.in_place_growth())
            .filter(|g| Carver::grows_in_place(&config) && g.granularity.is_power_of_two());
        // The bottom pools share the budget: each checks only that it holds no more than it.
        let totals = Arc::new(Totals::default());
        let bottom = |kind| {
            Carved::new(
                backend.clone(),
                config.clone(),
                budget.clone(),
                true,
                totals.clone(),
                kind,
            )
        };
        let bottoms = match growth {
            None => Bottoms::Blocks(bottom(Classes)),
            Some(growth) => Bottoms::InPlace {
                arena: Carved::new(
                    backend.clone(),
                    config.clone(),
                    budget.clone(),
                    true,
                    totals.clone(),
                    InPlace::new(growth, &config),
                ),
                blocks: bottom(Classes),
                expandables: Carved::new(
                    backend.clone(),
                    config.clone(),
                    budget.clone(),
                    true,
                    totals.clone(),
                    Dedicated { growth },
                ),
            },
        };
        Ok(ArenaPool {
            config,
            budget,
            shared_budget,
            totals,
            bottoms,
        })
    }

    /// The pool's configuration (after clamping; `budget` is the limit in force).
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// The backend the pool draws blocks from.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.block_pool().backend
    }

    /// The budget the pool reserves blocks against.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Alignment every allocation of this pool gets at least, in bytes.
    pub fn base_align(&self) -> u64 {
        self.block_pool().base_align
    }

    /// The request rounded to the copy alignment, and the alignment raised to the pool's base
    /// (every bottom pool checks alike: same backend, memory kind and budget).
    pub(crate) fn check_request(&self, size: u64, align: u64) -> Result<(u64, u64)> {
        self.block_pool().check_request(size, align)
    }

    /// The block pool, which every arena pool has.
    fn block_pool(&self) -> &BlockPool {
        match &self.bottoms {
            Bottoms::Blocks(b) | Bottoms::InPlace { blocks: b, .. } => b,
        }
    }
}

#[cfg(test)]
impl ArenaPool {
    /// The growing arena, where the pool has one.
    fn growing(&self) -> Option<&GrowingArena> {
        match &self.bottoms {
            Bottoms::Blocks(_) => None,
            Bottoms::InPlace { arena, .. } => Some(arena),
        }
    }
}

#[cfg(test)]
mod tests;
