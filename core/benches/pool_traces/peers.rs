//! The pools a trace is replayed through, each over a device that only counts: our dynamic pool
//! (in place with holes, in place at the end only, and on blocks), our record-and-replay pool
//! over it, and cubecl's memory management.
//!
//! No side touches memory: our pool runs over [`CountingBackend`], cubecl's memory management
//! over [`CountingStorage`]. Both count bytes held, physical allocations and mappings
//! (`counting.rs`), so the ratios measure the pools' policies and bookkeeping alone. Our pool
//! runs on a device that grows blocks in place and has holes (as CUDA's virtual memory
//! management with one physical allocation per granule, or the host), one that grows them at
//! their end only (CUDA mapping each growth as one allocation), and one that cannot (the
//! fallback of adding blocks, as on Vulkan without sparse binding or wgpu). The host backend
//! would commit real memory (the `rand_logu` trace peaks above 9 GiB live) and page-fault and
//! zero-fill it, which would swamp the pool's own cost and is not what a GPU driver call costs
//! either.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    ErrorGraph, ManagedMemoryHandle, MemoryAllocationMode, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, PageUpdate,
};
use cubecl_server::server::IoError;
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
use tensormem::backend::Backend;
use tensormem::pool::{Budget, ReplayConfig, ReplayPool, ReplayStats};

pub use crate::counting::Counters;
use crate::counting::CountingBackend;
use tensormem::{Allocation, ArenaConfig, ArenaPool, DevicePool, Result};

/// Largest single reservation both sides may make (a quarter of an 80 GiB device, what cubecl's
/// CUDA runtime states as its largest page there).
pub const MAX_BLOCK: u64 = 20 << 30;
/// Offset alignment both sides give every allocation.
pub const ALIGN: u64 = 256;
/// Default mapping granularity of the device that grows blocks in place: CUDA's
/// `cuMemGetAllocationGranularity` on current GPUs (`--granularity` sets another).
pub const GRANULARITY: u64 = 2 << 20;

/// The granularity in force (set once by `main` before any replay).
static GRANULE: AtomicU64 = AtomicU64::new(GRANULARITY);

/// Sets the in-place device's granularity (a power of two).
pub fn set_granularity(bytes: u64) {
    GRANULE.store(bytes, Ordering::Relaxed);
}

/// The in-place device's granularity.
pub fn granularity() -> u64 {
    GRANULE.load(Ordering::Relaxed)
}

/// A pool under test: allocate and free by trace id.
pub trait Peer {
    /// Label in the table and the SVG legend.
    const NAME: &'static str;
    /// A fresh, empty pool over a fresh counting device.
    fn create() -> Self;
    /// A fresh pool for a timed replay: over a device that keeps no books where the pool calls
    /// it on every allocation (our holes), else as [`Peer::create`].
    fn create_timed() -> Self
    where
        Self: Sized,
    {
        Self::create()
    }
    /// Serves the trace's allocation `id`.
    fn alloc(&mut self, id: u32, size: u64) -> std::result::Result<(), String>;
    /// Frees the trace's allocation `id`.
    fn free(&mut self, id: u32) -> std::result::Result<(), String>;
    /// A step (one model run) begins. Only a pool that plans steps does anything.
    fn begin_step(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }
    /// The step ends.
    fn end_step(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }
    /// The device's counters.
    fn counters(&self) -> &Counters;
    /// Checks the pool's own accounting against the device's (untimed replays only).
    fn check(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// A trace's live allocations by id, served by one of our pools.
#[derive(Default)]
struct Live(Vec<Option<Allocation>>);

impl Live {
    fn alloc(
        &mut self,
        pool: &dyn DevicePool,
        id: u32,
        size: u64,
    ) -> std::result::Result<(), String> {
        let a = pool.allocate(size, ALIGN, "").map_err(|e| e.to_string())?;
        let id = id as usize;
        if self.0.len() <= id {
            self.0.resize(id + 1, None);
        }
        self.0[id] = Some(a);
        Ok(())
    }

    fn free(&mut self, pool: &dyn DevicePool, id: u32) -> std::result::Result<(), String> {
        let a = self
            .0
            .get_mut(id as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("free of {id}, which is not live"))?;
        pool.free(a.handle).map_err(|e| e.to_string())
    }

    /// Frees what a trace left live (rand_logu does), so the pool's leak report stays quiet.
    fn clear(&mut self, pool: &dyn DevicePool) {
        for a in self.0.drain(..).flatten() {
            let _ = pool.free(a.handle);
        }
    }
}

/// How our pool's device grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// It cannot grow blocks in place: the pool adds blocks.
    Blocks,
    /// It grows blocks in place at their end only.
    InPlace,
    /// It grows blocks in place and decommits and remaps holes.
    Holes,
}

/// The [`Mode`] of a const generic parameter.
const fn mode(m: u8) -> Mode {
    match m {
        0 => Mode::Blocks,
        1 => Mode::InPlace,
        _ => Mode::Holes,
    }
}

/// Whether the pool of const generic parameter `m` learns placement (all but 3, the holes
/// path placed by TLSF alone: the comparison for `ArenaConfig::learned_placement`).
const fn learns(m: u8) -> bool {
    m != 3
}

/// tensormem's dynamic pool: the device arena pool, default configuration, on a device of
/// [`Mode`] `M` (0 blocks, 1 in place, 2 in place with holes; 3 with holes, placement learning
/// off).
pub struct Ours<const M: u8> {
    pool: ArenaPool,
    live: Live,
    counters: Arc<Counters>,
}

impl<const M: u8> Ours<M> {
    /// Our pool over a fresh counting device of mode `M`, as `device` adapts it.
    fn on(device: impl FnOnce(CountingBackend) -> CountingBackend) -> Self {
        let counters = Arc::new(Counters::default());
        let backend = Arc::new(device(CountingBackend::new(counters.clone(), mode(M))));
        #[expect(clippy::expect_used, reason = "the default configuration is valid")]
        let pool = our_pool(backend, learns(M)).expect("default pool");
        Ours {
            pool,
            live: Live::default(),
            counters,
        }
    }
}

/// The one place the bench names the pool API: the pool a runtime gets by default (with
/// `learned_placement` off when not `learns`).
fn our_pool(backend: Arc<dyn Backend>, learns: bool) -> Result<ArenaPool> {
    let config = ArenaConfig {
        learned_placement: learns,
        ..ArenaConfig::device()
    };
    ArenaPool::new(backend, config)
}

impl<const M: u8> Peer for Ours<M> {
    const NAME: &'static str = match (mode(M), learns(M)) {
        (Mode::Blocks, _) => "tensormem blocks",
        (Mode::InPlace, _) => "tensormem in place",
        (Mode::Holes, true) => "tensormem in place + holes",
        (Mode::Holes, false) => "  holes, TLSF placement only",
    };

    fn create() -> Self {
        Self::on(|b| b)
    }

    fn create_timed() -> Self {
        Self::on(CountingBackend::without_books)
    }

    fn alloc(&mut self, id: u32, size: u64) -> std::result::Result<(), String> {
        self.live.alloc(&self.pool, id, size)
    }

    fn free(&mut self, id: u32) -> std::result::Result<(), String> {
        self.live.free(&self.pool, id)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn check(&self) -> std::result::Result<(), String> {
        let (ours, device) = (self.pool.stats().reserved, self.counters.held());
        if ours != device {
            return Err(format!(
                "the pool reports {ours} bytes reserved, the device holds {device}"
            ));
        }
        self.pool.check_invariants()
    }
}

impl<const M: u8> Drop for Ours<M> {
    fn drop(&mut self) {
        self.live.clear(&self.pool);
    }
}

/// tensormem's record-and-replay pool over the default dynamic pool on a device of [`Mode`] `M`
/// (the default dynamic pool's two paths: 2 in place with holes, 0 blocks), steps marked by the
/// trace.
pub struct Replay<const M: u8> {
    pool: ReplayPool,
    live: Live,
    counters: Arc<Counters>,
    /// Events seen, and the first event after which a plan held the arena.
    events: usize,
    planned_from: Option<usize>,
}

impl<const M: u8> Replay<M> {
    /// Record-and-replay counters.
    pub fn stats(&self) -> ReplayStats {
        self.pool.replay_stats()
    }

    /// The first event index from which the arena held a plan (the steady state).
    pub fn planned_from(&self) -> Option<usize> {
        self.planned_from
    }

    /// The replay pool over a fresh counting device of mode `M`, as `device` adapts it.
    fn on(device: impl FnOnce(CountingBackend) -> CountingBackend) -> Self {
        let counters = Arc::new(Counters::default());
        let backend = Arc::new(device(CountingBackend::new(counters.clone(), mode(M))));
        // The arena joins the dynamic pool's budget, as in a runtime.
        #[expect(clippy::expect_used, reason = "the default configuration is valid")]
        let dynamic = ArenaPool::with_budget(backend, ArenaConfig::device(), Budget::new(None))
            .expect("default pool");
        Replay {
            pool: ReplayPool::new(Arc::new(dynamic), ReplayConfig::default()),
            live: Live::default(),
            counters,
            events: 0,
            planned_from: None,
        }
    }
}

impl<const M: u8> Peer for Replay<M> {
    const NAME: &'static str = match mode(M) {
        Mode::Blocks => "replay on blocks",
        _ => "replay",
    };

    fn create() -> Self {
        Self::on(|b| b)
    }

    fn create_timed() -> Self {
        Self::on(CountingBackend::without_books)
    }

    fn alloc(&mut self, id: u32, size: u64) -> std::result::Result<(), String> {
        self.events += 1;
        self.live.alloc(&self.pool, id, size)
    }

    fn free(&mut self, id: u32) -> std::result::Result<(), String> {
        self.events += 1;
        self.live.free(&self.pool, id)
    }

    fn begin_step(&mut self) -> std::result::Result<(), String> {
        self.pool.begin_step().map_err(|e| e.to_string())
    }

    fn end_step(&mut self) -> std::result::Result<(), String> {
        self.pool.end_step().map_err(|e| e.to_string())?;
        if self.planned_from.is_none() && self.pool.replay_stats().arena_size > 0 {
            self.planned_from = Some(self.events);
        }
        Ok(())
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl<const M: u8> Drop for Replay<M> {
    fn drop(&mut self) {
        self.live.clear(&self.pool);
    }
}

/// A cubecl storage whose pages are numbers.
pub struct CountingStorage {
    counters: Arc<Counters>,
    pages: HashMap<StorageId, u64>,
}

impl ComputeStorage for CountingStorage {
    type Resource = ();

    fn alignment(&self) -> usize {
        ALIGN as usize
    }

    fn get(&mut self, _: &StorageHandle) -> std::result::Result<(), IoError> {
        Ok(())
    }

    fn alloc(&mut self, size: u64) -> std::result::Result<StorageHandle, IoError> {
        let id = StorageId::new();
        self.pages.insert(id, size);
        self.counters.reserve(size);
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        // Counted as returned at once: the most favourable reading for cubecl.
        if let Some(size) = self.pages.remove(&id) {
            self.counters.release(size);
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.counters.held()
    }
}

/// cubecl's memory management in its default (`Adaptive`) configuration. A free is the drop of
/// the handle, as in cubecl's servers; the server's page relocation (copies) is not exercised.
pub struct Cubecl {
    memory: MemoryManagement<CountingStorage>,
    errors: ErrorGraph,
    live: Vec<Option<ManagedMemoryHandle>>,
    counters: Arc<Counters>,
}

impl Peer for Cubecl {
    const NAME: &'static str = "cubecl";

    fn create() -> Self {
        let counters = Arc::new(Counters::default());
        let storage = CountingStorage {
            counters: counters.clone(),
            pages: HashMap::new(),
        };
        let memory = MemoryManagement::from_configuration(
            storage,
            &cubecl_ir::MemoryDeviceProperties::new(MAX_BLOCK, ALIGN),
            MemoryConfiguration::Adaptive,
            Arc::new(ServerLogger::default()),
            MemoryManagementOptions::new("bench").mode(MemoryAllocationMode::Auto),
        );
        Cubecl {
            memory,
            errors: ErrorGraph::default(),
            live: Vec::new(),
            counters,
        }
    }

    fn alloc(&mut self, id: u32, size: u64) -> std::result::Result<(), String> {
        let h = self
            .memory
            .reserve(size, PageUpdate::Allow, &mut self.errors)
            .map_err(|e| e.to_string())?;
        let id = id as usize;
        if self.live.len() <= id {
            self.live.resize(id + 1, None);
        }
        self.live[id] = Some(h);
        Ok(())
    }

    fn free(&mut self, id: u32) -> std::result::Result<(), String> {
        self.live
            .get_mut(id as usize)
            .and_then(Option::take)
            .map(drop)
            .ok_or_else(|| format!("free of {id}, which is not live"))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}
