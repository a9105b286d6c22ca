//! The arena pool: blocks from a backend, carved by TLSF, with growth, trim, a hard budget,
//! ticket-deferred frees and an out-of-memory path that explains itself.
//!
//! One type serves every memory kind: with [`MemoryKind::DeviceLocal`] it is the device arena pool;
//! with `Upload` or `Readback` it is the host-visible (pinned) pool for host tensors that take part in
//! transfers.
//!
//! # Growth policy
//! A request that fits no existing block reserves a new block of [`PoolConfig::block_size`] bytes
//! (default 32 MiB, clamped to the device's largest block). A request larger than that gets a
//! dedicated block of exactly its (aligned) size. Blocks are returned to the backend only by
//! [`ArenaPool::trim`], or by the out-of-memory path, so a steady workload stops calling the driver.
//!
//! # Out-of-memory path
//! 1. reclaim frees whose tickets completed, retry in the existing blocks;
//! 2. reserve a new block if the budget allows;
//! 3. if the budget or the driver refuses, trim empty blocks and retry once;
//! 4. only then return [`Error::OutOfMemory`] with a report (requested, reserved, in use, largest free
//!    range, fragmentation, budget, pending frees, largest live allocations, advice).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::{Backend, BlockDesc, BlockId, BlockRange, MemoryKind, Ticket};
use crate::pool::deferred::Deferred;
use crate::pool::guard;
use crate::pool::slots::{Handle, Slots, next_pool_id};
use crate::suballoc::{Region, Tlsf};
use crate::trace::{EventKind, Tracer};
use crate::{Error, Result};

/// Largest alignment a pool accepts, in bytes (1 GiB).
pub const MAX_ALIGN: u64 = 1 << 30;

const SMALL_MAX: u64 = 1 << 20;
const GRANULE: u64 = 64 << 10;
const GROWTH_DIVISOR: u64 = 8;

/// Default block size of an arena pool: 32 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 32 << 20;

/// Configuration of an [`ArenaPool`].
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Name used in reports and errors ("device", "host-visible", ...).
    pub name: String,
    /// Memory kind of the pool's blocks.
    pub kind: MemoryKind,
    /// Size of a regular block in bytes (default 32 MiB, clamped to the device's largest block).
    /// Larger requests get a dedicated block. Bigger blocks mean fewer driver calls and more
    /// memory held idle.
    pub block_size: u64,
    /// Hard limit on reserved bytes (default: the backend's reported budget, else none). The pool
    /// never reserves more, whatever it costs in failed allocations.
    pub budget: Option<u64>,
    /// Clear memory before handing it out, so no allocation sees bytes another one left behind
    /// (what WebGPU guarantees for fresh buffers). Costs one fill per allocation. Default `false`.
    pub zero_on_reuse: bool,
    /// Debug guard margins: bytes reserved before and after every allocation (rounded up to the copy
    /// alignment; the front margin also to the allocation's alignment), filled with
    /// [`GUARD_PATTERN`](crate::pool::GUARD_PATTERN) and checked when the allocation is freed, which
    /// then fails with [`Error::Corruption`] naming the label. Default 0 (off); 64 is typical in
    /// tests. Margins count in [`PoolStats::in_use`]. Written and checked through mapping where the
    /// pool's memory is host-visible, through temporary upload/readback blocks and device copies
    /// elsewhere (a block allocation and a wait per margin: debug only). A checked free waits for
    /// the allocation's last use.
    pub guard_bytes: u64,
}

impl PoolConfig {
    /// The default device arena configuration.
    pub fn device() -> Self {
        PoolConfig {
            name: "device".into(),
            kind: MemoryKind::DeviceLocal,
            block_size: DEFAULT_BLOCK_SIZE,
            budget: None,
            zero_on_reuse: false,
            guard_bytes: 0,
        }
    }

    /// The default configuration of a host-visible pool of `kind` (`Upload` or `Readback`).
    pub fn host_visible(kind: MemoryKind) -> Self {
        PoolConfig {
            name: format!("host-visible ({})", kind.name()),
            kind,
            block_size: 8 << 20,
            budget: None,
            zero_on_reuse: false,
            guard_bytes: 0,
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig::device()
    }
}

/// A live allocation: the handle that owns it and where its bytes are. `Copy`; every use is checked
/// against the pool, so a copy kept after `free` is detected, not dangling.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The owning handle.
    pub handle: Handle,
    /// Block, offset and size (the size rounded up to the backend's copy alignment).
    pub range: BlockRange,
}

/// Counters of one pool. All sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolStats {
    /// Bytes in live allocations now (sizes after rounding).
    pub in_use: u64,
    /// Highest `in_use` seen.
    pub peak_in_use: u64,
    /// Bytes reserved in blocks now.
    pub reserved: u64,
    /// Highest `reserved` seen.
    pub peak_reserved: u64,
    /// Live allocations now.
    pub allocations: usize,
    /// Allocations made since creation.
    pub total_allocations: u64,
    /// Frees since creation (including deferred ones, counted when requested).
    pub total_frees: u64,
    /// Live blocks now.
    pub blocks: usize,
    /// Blocks reserved from the backend since creation.
    pub blocks_allocated: u64,
    /// Blocks returned to the backend since creation.
    pub blocks_freed: u64,
    /// Bytes whose free waits for in-flight work.
    pub pending_free: u64,
    /// Out-of-memory errors returned.
    pub oom_count: u64,
}

struct Block {
    id: BlockId,
    size: u64,
    tlsf: Tlsf,
    small: bool,
}

struct Live {
    block: usize,
    /// The sub-allocated region, guard margins included.
    region: Region,
    /// Offset of the data in `region` (the front guard margin), in bytes.
    front: u64,
    /// Bytes of data (the request rounded to the copy alignment).
    size: u64,
    label: String,
    last_use: Ticket,
    /// Id in the pool's tracer (0 when tracing was off at allocation).
    trace_id: u64,
}

impl Live {
    fn data_range(&self, block: BlockId) -> BlockRange {
        BlockRange {
            block,
            offset: self.region.offset + self.front,
            size: self.size,
        }
    }
}

struct State {
    /// `None` entries are blocks returned by trim; indices stay stable for `Live::block`.
    blocks: Vec<Option<Block>>,
    slots: Slots<Live>,
    /// Frees waiting for a ticket: block index, region, trace id.
    deferred: Deferred<(usize, Region, u64)>,
    stats: PoolStats,
    tracer: Option<Tracer>,
}

/// A pool of blocks of one memory kind, sub-allocated with TLSF. `Send + Sync`; all methods take
/// `&self` and serialise on one internal lock (sub-allocation is tens of nanoseconds).
pub struct ArenaPool {
    backend: Arc<dyn Backend>,
    config: PoolConfig,
    /// Alignment every allocation gets at least: the binding alignment for device memory, the copy
    /// alignment otherwise.
    base_align: u64,
    /// Whether `State::tracer` is set: lets hot paths skip the lock when tracing is off.
    traced: AtomicBool,
    state: Mutex<State>,
}

fn round_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

impl ArenaPool {
    /// Creates an empty pool; no block is reserved until the first allocation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero block size.
    pub fn new(backend: Arc<dyn Backend>, mut config: PoolConfig) -> Result<Self> {
        let caps = backend.capabilities();
        if config.block_size == 0 {
            return Err(Error::ZeroSize { what: "block size" });
        }
        config.block_size = config.block_size.min(caps.max_block_size);
        if config.budget.is_none() && config.kind == MemoryKind::DeviceLocal {
            config.budget = caps.budget;
        }
        let base_align = match config.kind {
            MemoryKind::DeviceLocal => caps.binding_align.max(caps.copy_align),
            _ => caps.copy_align,
        }
        .max(1)
        .next_power_of_two();
        Ok(ArenaPool {
            base_align,
            state: Mutex::new(State {
                blocks: Vec::new(),
                slots: Slots::new(next_pool_id(), "allocation"),
                deferred: Deferred::new(),
                stats: PoolStats::default(),
                tracer: None,
            }),
            traced: AtomicBool::new(false),
            backend,
            config,
        })
    }

    /// The pool's configuration (after clamping).
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The backend the pool draws blocks from.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Starts (`Some`) or stops (`None`) recording this pool's allocations, frees and blocks into a
    /// tracer (see [`crate::trace`]). Allocations made while tracing was off are not traced later.
    pub fn set_tracer(&self, tracer: Option<Tracer>) {
        let mut st = self.lock();
        self.traced.store(tracer.is_some(), Ordering::Release);
        st.tracer = tracer;
    }

    /// The tracer, if one is set. One atomic load when none is.
    pub fn tracer(&self) -> Option<Tracer> {
        if !self.traced.load(Ordering::Acquire) {
            return None;
        }
        self.lock().tracer.clone()
    }

    /// The allocation's id in the pool's tracer (0 when it was made with tracing off).
    ///
    /// # Errors
    /// As [`ArenaPool::resolve`].
    pub fn trace_id(&self, handle: Handle) -> Result<u64> {
        Ok(self.lock().slots.get(handle)?.trace_id)
    }

    /// Whether allocations carry guard margins.
    fn guards_checked(&self) -> bool {
        self.config.guard_bytes > 0
    }

    /// Whether the pool's blocks can be mapped (else guard margins are staged through copies).
    fn mapped(&self) -> bool {
        self.config.kind != MemoryKind::DeviceLocal
            || self.backend.capabilities().device_host_visible
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allocates `size` bytes aligned to `align` (at least the pool's base alignment).
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::InvalidAlignment`], [`Error::TooLarge`] (beyond the largest
    /// block or the budget: hopeless), [`Error::OutOfMemory`] (retryable, with a report),
    /// backend errors such as [`Error::DeviceLost`].
    pub fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        if size == 0 {
            return Err(Error::ZeroSize { what: "allocation" });
        }
        if align == 0 || !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(Error::InvalidAlignment {
                align,
                max: MAX_ALIGN,
            });
        }
        let align = align.max(self.base_align);
        let caps = self.backend.capabilities();
        let copy_align = caps.copy_align.max(1).next_power_of_two();
        let limit = caps.max_block_size;
        let rounded =
            round_up(size, copy_align)
                .filter(|r| *r <= limit)
                .ok_or(Error::TooLarge {
                    what: "allocation",
                    requested: size,
                    limit,
                    limit_name: "largest block of the device",
                })?;
        if let Some(budget) = self.config.budget {
            if rounded > budget {
                return Err(Error::TooLarge {
                    what: "allocation",
                    requested: size,
                    limit: budget,
                    limit_name: "pool budget",
                });
            }
        }
        // Guard margins: the front one keeps the data aligned.
        let (front, total) = match self.config.guard_bytes {
            0 => (0, rounded),
            g => {
                let back = round_up(g, copy_align).unwrap_or(g);
                let front = round_up(back, align).unwrap_or(back);
                (front, rounded.saturating_add(front).saturating_add(back))
            }
        };
        let mut st = self.lock();
        let found = match self.try_existing(&mut st, total, align)? {
            Some(found) => Some(found),
            None => {
                self.reclaim_locked(&mut st)?;
                match self.try_existing(&mut st, total, align)? {
                    Some(found) => Some(found),
                    None => self.grow(&mut st, total, align, label)?,
                }
            }
        };
        let Some((block, region)) = found else {
            st.stats.oom_count += 1;
            return Err(Error::OutOfMemory(Box::new(
                self.oom_report(&st, size, total, align, label),
            )));
        };
        let block_id = st.blocks[block]
            .as_ref()
            .map(|b| b.id)
            .unwrap_or(BlockId(0));
        let mut live = Live {
            block,
            region,
            front,
            size: rounded,
            label: label.to_string(),
            last_use: Ticket::DONE,
            trace_id: 0,
        };
        let range = live.data_range(block_id);
        if self.config.zero_on_reuse {
            live.last_use = self.zero(range)?;
        }
        if self.guards_checked() {
            guard::fill(
                self.backend.as_ref(),
                block_id,
                (live.region.offset, live.region.size),
                front,
                rounded,
                self.mapped(),
            )?;
        }
        if let Some(t) = &st.tracer {
            live.trace_id = t.next_id();
            t.record(EventKind::Alloc {
                id: live.trace_id,
                pool: self.config.name.clone(),
                size: rounded,
                offset: range.offset,
                label: label.to_string(),
                parent: None,
            });
        }
        let handle = st.slots.insert(live);
        let s = &mut st.stats;
        s.in_use += total;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.allocations += 1;
        s.total_allocations += 1;
        Ok(Allocation { handle, range })
    }

    fn zero(&self, range: BlockRange) -> Result<Ticket> {
        if self.config.kind == MemoryKind::DeviceLocal {
            return self.backend.fill_zero(range);
        }
        const CHUNK: usize = 1 << 20;
        let zeros = vec![0u8; CHUNK.min(range.size as usize)];
        let mut off = 0;
        while off < range.size {
            let n = (range.size - off).min(zeros.len() as u64);
            self.backend
                .write_mapped(range.block, range.offset + off, &zeros[..n as usize])?;
            off += n;
        }
        Ok(Ticket::DONE)
    }

    fn try_existing(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        let small = size <= SMALL_MAX;
        let mut order: Vec<(u64, usize)> = st
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let b = b.as_ref()?;
                (b.small == small && b.tlsf.free_bytes() >= size).then(|| (b.tlsf.free_bytes(), i))
            })
            .collect();
        order.sort_unstable();
        for (_, i) in order {
            if let Some(b) = st.blocks[i].as_mut() {
                if let Some(region) = b.tlsf.allocate(size, align)? {
                    return Ok(Some((i, region)));
                }
            }
        }
        Ok(None)
    }

    /// Reserves a new block for a request of `size` bytes, trimming first when the budget or the
    /// driver refuses. `Ok(None)` means out of memory.
    fn grow(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<(usize, Region)>> {
        let copy_align = self
            .backend
            .capabilities()
            .copy_align
            .max(1)
            .next_power_of_two();
        let small = size <= SMALL_MAX;
        // Consolidate: the class's empty blocks go back and their bytes join the new block.
        let mut folded = 0;
        let mut class_reserved = 0;
        for i in 0..st.blocks.len() {
            let Some(b) = st.blocks[i].as_ref() else {
                continue;
            };
            if b.small != small {
                continue;
            }
            if b.tlsf.is_empty() {
                if let Some(b) = st.blocks[i].take() {
                    self.backend.free_block(b.id)?;
                    folded += b.size;
                    st.stats.reserved -= b.size;
                    st.stats.blocks -= 1;
                    st.stats.blocks_freed += 1;
                }
            } else {
                class_reserved += b.size;
            }
        }
        let step = (class_reserved / GROWTH_DIVISOR).min(self.config.block_size);
        let want = round_up((size + folded).max(step), GRANULE).unwrap_or(size);
        for attempt in 0..2 {
            let room = self
                .config
                .budget
                .map_or(u64::MAX, |b| b.saturating_sub(st.stats.reserved));
            // A full-size block if the budget allows, else just enough for this request.
            let block_size = if want <= room {
                want
            } else if size <= room {
                size
            } else {
                if attempt == 0 && self.trim_locked(st)? > 0 {
                    continue;
                }
                return Ok(None);
            };
            let block_size = round_up(block_size, copy_align).unwrap_or(block_size);
            let desc = BlockDesc {
                kind: self.config.kind,
                size: block_size,
                label: &format!("tensormem {} block for {label}", self.config.name),
            };
            match self.backend.alloc_block(&desc) {
                Ok(id) => {
                    let mut tlsf = Tlsf::new(block_size)?;
                    let region = tlsf.allocate(size, align)?;
                    let idx = match st.blocks.iter().position(Option::is_none) {
                        Some(i) => i,
                        None => {
                            st.blocks.push(None);
                            st.blocks.len() - 1
                        }
                    };
                    st.blocks[idx] = Some(Block {
                        id,
                        size: block_size,
                        tlsf,
                        small,
                    });
                    if let Some(t) = &st.tracer {
                        t.record(EventKind::BlockReserve {
                            pool: self.config.name.clone(),
                            block: id.0,
                            size: block_size,
                        });
                    }
                    let s = &mut st.stats;
                    s.reserved += block_size;
                    s.peak_reserved = s.peak_reserved.max(s.reserved);
                    s.blocks += 1;
                    s.blocks_allocated += 1;
                    return Ok(region.map(|r| (idx, r)));
                }
                Err(Error::OutOfMemory(_)) if attempt == 0 => {
                    if self.trim_locked(st)? == 0 {
                        return Ok(None);
                    }
                }
                Err(Error::OutOfMemory(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Frees an allocation once the last work recorded against it (see
    /// [`ArenaPool::mark_used`]) completes; immediately if it already has.
    ///
    /// # Errors
    /// [`Error::DoubleFree`], [`Error::StaleHandle`], [`Error::ForeignHandle`]; nothing is freed
    /// then.
    pub fn free(&self, handle: Handle) -> Result<()> {
        self.free_after(handle, Ticket::DONE)
    }

    /// Frees an allocation once `ticket` (and the allocation's own last use) completes.
    ///
    /// # Errors
    /// As [`ArenaPool::free`].
    pub fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let live = st.slots.remove(handle)?;
        let wait = ticket.max(live.last_use);
        let size = live.region.size;
        st.stats.in_use -= size;
        st.stats.allocations -= 1;
        st.stats.total_frees += 1;
        if let Some(t) = &st.tracer {
            t.record(EventKind::FreeRequested { id: live.trace_id });
        }
        let mut corruption = None;
        if self.guards_checked() {
            // The margins can only be judged once the work that used the allocation is done.
            self.backend.wait(wait)?;
            let block_id = st.blocks[live.block]
                .as_ref()
                .map(|b| b.id)
                .unwrap_or(BlockId(0));
            corruption = guard::check(
                self.backend.as_ref(),
                block_id,
                (live.region.offset, live.region.size),
                live.front,
                live.size,
                self.mapped(),
            )?;
        }
        // No device work touched it: skip asking the backend.
        if wait == Ticket::DONE || wait <= self.backend.completed()? {
            Self::release(&mut st, live.block, live.region, live.trace_id)?;
        } else {
            st.deferred
                .push(wait, size, (live.block, live.region, live.trace_id));
            st.stats.pending_free = st.deferred.bytes();
        }
        match corruption {
            Some(what) => Err(Error::Corruption(format!(
                "{what} of allocation '{}' ({} bytes) in the {} pool",
                live.label, live.size, self.config.name
            ))),
            None => Ok(()),
        }
    }

    fn release(st: &mut State, block: usize, region: Region, trace_id: u64) -> Result<()> {
        if let Some(t) = &st.tracer {
            t.record(EventKind::FreeReclaimed { id: trace_id });
        }
        match st.blocks.get_mut(block).and_then(Option::as_mut) {
            Some(b) => b.tlsf.free(region),
            None => Err(Error::invalid("allocation refers to a released block")),
        }
    }

    fn reclaim_locked(&self, st: &mut State) -> Result<()> {
        if st.deferred.bytes() == 0 {
            return Ok(());
        }
        let completed = self.backend.completed()?;
        for (block, region, trace_id) in st.deferred.reclaim(completed) {
            Self::release(st, block, region, trace_id)?;
        }
        st.stats.pending_free = st.deferred.bytes();
        Ok(())
    }

    /// Returns to the pool every deferred free whose ticket has completed.
    ///
    /// # Errors
    /// Backend errors ([`Error::DeviceLost`]).
    pub fn reclaim(&self) -> Result<()> {
        let mut st = self.lock();
        self.reclaim_locked(&mut st)
    }

    /// Checks a handle and returns where its bytes are.
    ///
    /// # Errors
    /// [`Error::StaleHandle`] after the allocation was freed, [`Error::ForeignHandle`].
    pub fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let st = self.lock();
        let live = st.slots.get(handle)?;
        let block = st.blocks[live.block]
            .as_ref()
            .map(|b| b.id)
            .ok_or_else(|| Error::invalid("allocation refers to a released block"))?;
        Ok(live.data_range(block))
    }

    /// Records that work with `ticket` uses the allocation: its free will wait for that ticket.
    ///
    /// # Errors
    /// As [`ArenaPool::resolve`].
    pub fn mark_used(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let mut st = self.lock();
        let live = st.slots.get_mut(handle)?;
        live.last_use = live.last_use.max(ticket);
        Ok(())
    }

    /// The latest ticket recorded against the allocation.
    ///
    /// # Errors
    /// As [`ArenaPool::resolve`].
    pub fn last_use(&self, handle: Handle) -> Result<Ticket> {
        Ok(self.lock().slots.get(handle)?.last_use)
    }

    /// The label given at allocation.
    ///
    /// # Errors
    /// As [`ArenaPool::resolve`].
    pub fn label(&self, handle: Handle) -> Result<String> {
        Ok(self.lock().slots.get(handle)?.label.clone())
    }

    /// Returns every empty block to the backend (after reclaiming completed frees). Returns the
    /// bytes released.
    ///
    /// # Errors
    /// Backend errors; blocks already released stay released.
    pub fn trim(&self) -> Result<u64> {
        let mut st = self.lock();
        self.reclaim_locked(&mut st)?;
        self.trim_locked(&mut st)
    }

    fn trim_locked(&self, st: &mut State) -> Result<u64> {
        self.reclaim_locked(st)?;
        // Blocks with pending frees are not empty in their TLSF, so they are kept.
        let mut released = 0;
        for slot in st.blocks.iter_mut() {
            if slot.as_ref().is_some_and(|b| b.tlsf.is_empty()) {
                if let Some(b) = slot.take() {
                    if let Some(t) = &st.tracer {
                        t.record(EventKind::BlockRelease {
                            pool: self.config.name.clone(),
                            block: b.id.0,
                            size: b.size,
                        });
                    }
                    self.backend.free_block(b.id)?;
                    released += b.size;
                    st.stats.reserved -= b.size;
                    st.stats.blocks -= 1;
                    st.stats.blocks_freed += 1;
                }
            }
        }
        Ok(released)
    }

    /// Counters of the pool.
    pub fn stats(&self) -> PoolStats {
        let st = self.lock();
        let mut s = st.stats.clone();
        s.pending_free = st.deferred.bytes();
        s
    }

    /// Largest free range in any block, and the fragmentation over all blocks
    /// (1 − largest free / total free).
    pub fn fragmentation(&self) -> (u64, f64) {
        let st = self.lock();
        let (mut free, mut largest) = (0u64, 0u64);
        for b in st.blocks.iter().flatten() {
            let r = b.tlsf.report();
            free += r.free;
            largest = largest.max(r.largest_free);
        }
        let frag = if free == 0 {
            0.0
        } else {
            1.0 - largest as f64 / free as f64
        };
        (largest, frag)
    }

    /// Live allocations as (label, size in bytes), largest first: the leak report.
    pub fn live_allocations(&self) -> Vec<(String, u64)> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .slots
            .iter()
            .map(|l| (l.label.clone(), l.region.size))
            .collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.1));
        v
    }

    /// Fails with [`Error::Leak`] when allocations are still live (strict mode for tests).
    ///
    /// # Errors
    /// [`Error::Leak`] listing each live allocation.
    pub fn check_leaks(&self) -> Result<()> {
        let st = self.lock();
        if st.slots.len() == 0 {
            return Ok(());
        }
        let bytes = st.slots.iter().map(|l| l.region.size).sum();
        Err(Error::Leak {
            count: st.slots.len(),
            bytes,
            report: Self::leak_report(&st, usize::MAX),
        })
    }

    /// One line per live allocation (largest first, at most `max`), followed by where it was
    /// made when the tracer records backtraces.
    fn leak_report(st: &State, max: usize) -> String {
        let mut live: Vec<&Live> = st.slots.iter().collect();
        live.sort_by_key(|l| std::cmp::Reverse(l.region.size));
        let mut out = Vec::new();
        for l in live.into_iter().take(max) {
            let label = if l.label.is_empty() {
                "<unlabelled>"
            } else {
                &l.label
            };
            out.push(format!("  {} bytes: {label}", l.region.size));
            if let Some(bt) = st.tracer.as_ref().and_then(|t| t.backtrace_of(l.trace_id)) {
                out.push(format!("    allocated at:\n{bt}"));
            }
        }
        out.join("\n")
    }

    /// Checks every block's sub-allocator and the pool's counters. For tests.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let st = self.lock();
        let mut reserved = 0;
        let mut used = 0;
        for b in st.blocks.iter().flatten() {
            b.tlsf.check_invariants()?;
            reserved += b.size;
            used += b.tlsf.report().used;
        }
        if reserved != st.stats.reserved {
            return Err(format!(
                "reserved {} != blocks {reserved}",
                st.stats.reserved
            ));
        }
        let live: u64 = st.slots.iter().map(|l| l.region.size).sum();
        if live != st.stats.in_use {
            return Err(format!("in_use {} != live {live}", st.stats.in_use));
        }
        // TLSF may hand out a little slack with a region (never more than its minimum block), so
        // sub-allocated bytes bound the live ones from above, and are zero exactly when nothing is.
        let held = live + st.deferred.bytes();
        if used < held || (held == 0) != (used == 0) {
            return Err(format!(
                "sub-allocated {used} inconsistent with live {live} + pending {}",
                st.deferred.bytes()
            ));
        }
        if st.slots.len() != st.stats.allocations {
            return Err("allocation count out of sync".into());
        }
        Ok(())
    }
}

impl Drop for ArenaPool {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if st.slots.len() > 0 {
            let bytes: u64 = st.slots.iter().map(|l| l.region.size).sum();
            eprintln!(
                "tensormem: {} pool dropped with {} live allocation(s), {bytes} bytes (leak report):",
                self.config.name,
                st.slots.len()
            );
            eprintln!("{}", Self::leak_report(st, 20));
        }
        // Blocks may still be used by in-flight work: wait for everything before returning them.
        if let Ok(t) = self.backend.flush() {
            let _ = self.backend.wait(t);
        }
        for b in st.blocks.iter_mut().filter_map(Option::take) {
            if let Some(t) = &st.tracer {
                t.record(EventKind::BlockRelease {
                    pool: self.config.name.clone(),
                    block: b.id.0,
                    size: b.size,
                });
            }
            let _ = self.backend.free_block(b.id);
        }
    }
}

mod oom;

#[cfg(test)]
mod tests;
