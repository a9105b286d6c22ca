//! The pools a trace is replayed through, each over a device that only counts: our dynamic pool
//! (in place and on blocks), our record-and-replay pool over it, and cubecl's memory management.
//!
//! No side touches memory: our pool runs over [`CountingBackend`], cubecl's memory management
//! over [`CountingStorage`]. Both count bytes held and reservations, so the ratios measure the
//! pools' policies and bookkeeping alone. Our pool runs twice: on a device that grows blocks in
//! place (as CUDA's virtual memory management does, with its 2 MiB granularity; every growth is
//! counted as a reservation, since it is a driver call that maps new memory), and on one that
//! cannot (the fallback of adding blocks, as on Vulkan without sparse binding or wgpu). The host backend would commit real memory (the
//! `rand_logu` trace peaks above 9 GiB live) and page-fault and zero-fill it, which would swamp
//! the pool's own cost and is not what a GPU driver call costs either.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    ErrorGraph, ManagedMemoryHandle, MemoryAllocationMode, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, PageUpdate,
};
use cubecl_server::server::IoError;
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
use tensormem::backend::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, DeviceType, InPlaceGrowth, Ticket,
};
use tensormem::pool::{Budget, ReplayConfig, ReplayPool, ReplayStats};
use tensormem::{Allocation, ArenaConfig, ArenaPool, DevicePool, Error, Op, Result};

/// Largest single reservation both sides may make (a quarter of an 80 GiB device, what cubecl's
/// CUDA runtime states as its largest page there).
pub const MAX_BLOCK: u64 = 20 << 30;
/// Offset alignment both sides give every allocation.
pub const ALIGN: u64 = 256;
/// Mapping granularity of the device that grows blocks in place: CUDA's
/// `cuMemGetAllocationGranularity` on current GPUs.
pub const GRANULARITY: u64 = 2 << 20;

/// What a device has handed out: bytes held now and at most, reservations and releases.
#[derive(Default)]
pub struct Counters {
    held: AtomicU64,
    peak: AtomicU64,
    reserves: AtomicU64,
    releases: AtomicU64,
}

impl Counters {
    fn reserve(&self, size: u64) {
        let now = self.held.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.reserves.fetch_add(1, Ordering::Relaxed);
    }

    fn release(&self, size: u64) {
        self.held.fetch_sub(size, Ordering::Relaxed);
        self.releases.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Most bytes held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Reservations made.
    pub fn reserves(&self) -> u64 {
        self.reserves.load(Ordering::Relaxed)
    }

    /// Reservations returned.
    pub fn releases(&self) -> u64 {
        self.releases.load(Ordering::Relaxed)
    }
}

/// A pool under test: allocate and free by trace id.
pub trait Peer {
    /// Label in the table and the SVG legend.
    const NAME: &'static str;
    /// A fresh, empty pool over a fresh counting device.
    fn create() -> Self;
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
}

/// A backend whose blocks are numbers: no memory, no queue.
pub struct CountingBackend {
    caps: Capabilities,
    /// Offered growth in place, if any.
    growth: Option<InPlaceGrowth>,
    counters: Arc<Counters>,
    blocks: Mutex<HashMap<u64, u64>>,
    next: AtomicU64,
}

impl CountingBackend {
    fn new(counters: Arc<Counters>, in_place: bool) -> Self {
        CountingBackend {
            growth: in_place.then_some(InPlaceGrowth {
                granularity: GRANULARITY,
                max_reserve: 1 << 40,
            }),
            caps: Capabilities {
                backend: "counting",
                device_name: "counting device (no memory)".into(),
                device_type: DeviceType::Unknown,
                binding_align: ALIGN,
                copy_align: 4,
                max_block_size: MAX_BLOCK,
                max_binding_size: MAX_BLOCK,
                device_host_visible: false,
                queued_write_max: 0,
                budget: None,
            },
            counters,
            blocks: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    fn unsupported(what: &str) -> Error {
        Error::Unsupported {
            backend: "counting",
            what: what.into(),
        }
    }
}

impl Backend for CountingBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, desc.size);
        self.counters.reserve(desc.size);
        Ok(BlockId(id))
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let size = self
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&block.0)
            .ok_or_else(|| Error::invalid(format!("unknown block {}", block.0)))?;
        self.counters.release(size);
        Ok(())
    }

    fn in_place_growth(&self) -> Option<InPlaceGrowth> {
        self.growth
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, _reserve: u64) -> Result<BlockId> {
        if self.growth.is_none() {
            return Err(Self::unsupported("in-place growth"));
        }
        self.alloc_block(desc)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let old = blocks
            .get_mut(&block.0)
            .ok_or_else(|| Error::invalid(format!("unknown block {}", block.0)))?;
        // A growth maps new memory (a driver call, counted as a reservation); a shrink unmaps.
        if size > *old {
            self.counters.reserve(size - *old);
        } else {
            self.counters.release(*old - size);
        }
        *old = size;
        Ok(size)
    }

    fn write_mapped(&self, _: BlockId, _: u64, _: &[u8]) -> Result<()> {
        Err(Self::unsupported("mapped writes"))
    }

    fn read_mapped(&self, _: BlockId, _: u64, _: &mut [u8]) -> Result<()> {
        Err(Self::unsupported("mapped reads"))
    }

    fn copy(&self, _: BlockRange, _: BlockRange) -> Result<Ticket> {
        Err(Self::unsupported("copies"))
    }

    fn fill_zero(&self, _: BlockRange) -> Result<Ticket> {
        Err(Self::unsupported("fills"))
    }

    fn dispatch(&self, _: &Op, _: &[BlockRange]) -> Result<Ticket> {
        Err(Self::unsupported("ops"))
    }

    fn flush(&self) -> Result<Ticket> {
        Ok(Ticket::DONE)
    }

    fn completed(&self) -> Result<Ticket> {
        Ok(Ticket::DONE)
    }

    fn wait_timeout(&self, _: Ticket, _: Option<std::time::Duration>) -> Result<()> {
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

/// tensormem's dynamic pool: the device arena pool, default configuration, on a device that grows
/// blocks in place (`IN_PLACE`) or not.
pub struct Ours<const IN_PLACE: bool> {
    pool: ArenaPool,
    live: Live,
    counters: Arc<Counters>,
}

/// The one place the bench names the pool API: the pool a runtime gets by default.
fn our_pool(backend: Arc<dyn Backend>) -> Result<ArenaPool> {
    ArenaPool::new(backend, ArenaConfig::device())
}

impl<const IN_PLACE: bool> Peer for Ours<IN_PLACE> {
    const NAME: &'static str = if IN_PLACE {
        "tensormem in place"
    } else {
        "tensormem blocks"
    };

    fn create() -> Self {
        let counters = Arc::new(Counters::default());
        let backend = Arc::new(CountingBackend::new(counters.clone(), IN_PLACE));
        #[expect(clippy::expect_used, reason = "the default configuration is valid")]
        let pool = our_pool(backend).expect("default pool");
        Ours {
            pool,
            live: Live::default(),
            counters,
        }
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
}

impl<const IN_PLACE: bool> Drop for Ours<IN_PLACE> {
    fn drop(&mut self) {
        self.live.clear(&self.pool);
    }
}

/// tensormem's record-and-replay pool over the default dynamic pool on a device that grows blocks
/// in place, steps marked by the trace.
pub struct Replay {
    pool: ReplayPool,
    live: Live,
    counters: Arc<Counters>,
    /// Events seen, and the first event after which a plan held the arena.
    events: usize,
    planned_from: Option<usize>,
}

impl Replay {
    /// Record-and-replay counters.
    pub fn stats(&self) -> ReplayStats {
        self.pool.replay_stats()
    }

    /// The first event index from which the arena held a plan (the steady state).
    pub fn planned_from(&self) -> Option<usize> {
        self.planned_from
    }
}

impl Peer for Replay {
    const NAME: &'static str = "replay";

    fn create() -> Self {
        let counters = Arc::new(Counters::default());
        let backend = Arc::new(CountingBackend::new(counters.clone(), true));
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

impl Drop for Replay {
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
