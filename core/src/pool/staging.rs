//! The staging belt: uploads and readbacks through host-visible memory, in rings reclaimed by
//! tickets.
//!
//! Uploads write into an `Upload` block's ring region and enqueue a device copy; the region is
//! retired with the copy's ticket and reused once that ticket completes. Readbacks enqueue a copy
//! into a `Readback` region, wait for it and read it out. A transfer larger than one belt block is
//! split into chunks, never refused. When every block is busy the belt grows up to
//! [`StagingConfig::max_blocks`], then waits for the oldest work. Every transfer is written once
//! as an `async fn` over [`Waiting`]: the blocking forms (native only) and the `_async` forms
//! (every target, the only ones in a browser) share it. Blocks beyond
//! [`StagingConfig::keep_blocks`] that stay idle for [`StagingConfig::idle_trim_after`] are returned
//! to the backend (wgpu's own `StagingBelt` never shrinks; this one does).
//!
//! In a runtime the belt is a member of the [`Budget`]'s pressure path: when a device pool cannot
//! grow, the belt returns every empty block (even those it would keep); when the driver refuses
//! the belt a block, it trims itself and asks the runtime's other pools to release idle blocks
//! before it reports out of memory.
//!
//! [`Waiting`]: crate::backend::Waiting

mod blocks;
mod transfer;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crate::time::Instant;

use crate::backend::{Backend, BlockId, MemoryKind};
use crate::pool::budget::{Budget, MemberId, Reclaim};
use crate::suballoc::RingAllocator;
use crate::trace::Tracer;
use crate::{Error, Result};

/// Configuration of a [`StagingBelt`].
#[derive(Clone, Debug)]
pub struct StagingConfig {
    /// Bytes per belt block, and the largest chunk of one transfer (default 8 MiB). Bigger blocks
    /// amortise copies better and pin more host memory.
    pub block_size: u64,
    /// Most blocks per direction (default 8). When all are busy, the belt waits for the oldest work.
    pub max_blocks: usize,
    /// Blocks per direction kept even when idle (default 1).
    pub keep_blocks: usize,
    /// How long a block must stay idle before it is returned (default 2 s).
    pub idle_trim_after: Duration,
}

impl Default for StagingConfig {
    fn default() -> Self {
        StagingConfig {
            block_size: 8 << 20,
            max_blocks: 8,
            keep_blocks: 1,
            idle_trim_after: Duration::from_secs(2),
        }
    }
}

/// Counters of a staging belt. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Bytes copied host → device through the belt.
    pub uploaded: u64,
    /// Bytes copied device → host through the belt.
    pub downloaded: u64,
    /// Chunks (device copies) issued.
    pub chunks: u64,
    /// Live blocks, both directions.
    pub blocks: usize,
    /// Bytes in live blocks.
    pub reserved: u64,
    /// Blocks reserved since creation.
    pub blocks_allocated: u64,
    /// Blocks returned since creation (trim).
    pub blocks_freed: u64,
    /// Times the belt had to wait for in-flight work to free space.
    pub stalls: u64,
}

struct BeltBlock {
    id: BlockId,
    ring: RingAllocator,
    last_active: Instant,
}

struct Belt {
    kind: MemoryKind,
    blocks: Vec<BeltBlock>,
    /// Block that takes the next chunk (round robin keeps rings FIFO-friendly).
    current: usize,
}

struct State {
    upload: Belt,
    readback: Belt,
    stats: StagingStats,
    /// Records block reserve/release events when tracing is on.
    tracer: Option<Tracer>,
}

/// Uploads and readbacks through host-visible rings. `Send + Sync`.
pub struct StagingBelt {
    backend: Arc<dyn Backend>,
    config: StagingConfig,
    align: u64,
    /// The runtime budget this belt is a member of, and its member id (skipped when it asks).
    pressure: OnceLock<(Arc<Budget>, MemberId)>,
    state: Mutex<State>,
}

impl StagingBelt {
    /// Creates an empty belt; blocks are reserved on first use.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for a zero block size or block count.
    pub fn new(backend: Arc<dyn Backend>, mut config: StagingConfig) -> Result<Self> {
        if config.block_size == 0 || config.max_blocks == 0 {
            return Err(Error::ZeroSize {
                what: "staging belt",
            });
        }
        let caps = backend.capabilities();
        let align = caps.copy_align.max(1).next_power_of_two();
        config.block_size = (config.block_size.min(caps.max_block_size) / align * align).max(align);
        config.keep_blocks = config.keep_blocks.min(config.max_blocks);
        let belt = |kind| Belt {
            kind,
            blocks: Vec::new(),
            current: 0,
        };
        Ok(StagingBelt {
            backend,
            config,
            align,
            pressure: OnceLock::new(),
            state: Mutex::new(State {
                upload: belt(MemoryKind::Upload),
                readback: belt(MemoryKind::Readback),
                stats: StagingStats::default(),
                tracer: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the belt ask `budget`'s other members for idle blocks when the driver refuses it one
    /// (`id`: the belt's own membership, registered by the caller). Only the first call counts.
    pub fn join(&self, budget: Arc<Budget>, id: MemberId) {
        let _ = self.pressure.set((budget, id));
    }

    /// Returns every empty block beyond `keep_blocks` now, whatever its idle time. Returns the
    /// number of blocks released.
    ///
    /// # Errors
    /// Backend errors.
    pub fn trim(&self) -> Result<usize> {
        let mut st = self.lock();
        let before = st.stats.blocks;
        let keep = self.config.keep_blocks;
        let completed = self.backend.completed()?;
        self.release(&mut st, |belt_len, b| {
            b.ring.reclaim(completed.0);
            belt_len > keep && b.ring.is_empty()
        })?;
        Ok(before - st.stats.blocks)
    }

    /// Turns tracing of the belt's block reserve and release on (`Some`) or off (`None`).
    pub fn set_tracer(&self, tracer: Option<Tracer>) {
        self.lock().tracer = tracer;
    }

    /// Counters of the belt.
    pub fn stats(&self) -> StagingStats {
        self.lock().stats.clone()
    }

    /// The belt's configuration (after clamping to the device).
    pub fn config(&self) -> &StagingConfig {
        &self.config
    }
}

/// Under pressure the belt returns every empty block, those it would keep included.
impl Reclaim for StagingBelt {
    fn release_idle(&self) -> Result<u64> {
        let mut st = self.lock();
        let completed = self.backend.completed()?;
        self.release(&mut st, |_, b| {
            b.ring.reclaim(completed.0);
            b.ring.is_empty()
        })
    }
}

impl Drop for StagingBelt {
    fn drop(&mut self) {
        // As the arena pool's drop: never free blocks that in-flight work may still use. On
        // `wasm32` there is no blocking wait, and none is needed: WebGPU keeps a destroyed
        // buffer's memory until the work using it completes.
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.backend.flush().and_then(|t| self.backend.wait(t)) {
            eprintln!(
                "tensormem: staging belt dropped while device work may still run ({e}); its \
                 blocks are left to the backend instead of freed"
            );
            return;
        }
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for belt in [&mut st.upload, &mut st.readback] {
            for b in belt.blocks.drain(..) {
                let _ = self.backend.free_block(b.id);
            }
        }
    }
}

#[cfg(test)]
mod tests;
