//! The devices the pools run on in the bench: blocks that are numbers, counted. Our pool runs
//! over [`CountingBackend`] and cubecl's memory management over a counting storage (in
//! `peers.rs`); both report to [`Counters`], so the ratios measure the pools' policies and
//! bookkeeping alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tensormem::backend::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, DeviceType, InPlaceGrowth, Ticket,
};
use tensormem::{Error, Op, Result};

use crate::peers::{ALIGN, GRANULARITY, MAX_BLOCK, Mode, granularity};

/// What a device has handed out: bytes held now and at most, physical allocations made and
/// returned, and mappings made and removed.
#[derive(Default)]
pub struct Counters {
    held: AtomicU64,
    peak: AtomicU64,
    reserves: AtomicU64,
    releases: AtomicU64,
    maps: AtomicU64,
    unmaps: AtomicU64,
}

impl Counters {
    /// `count` physical allocations of `size` bytes in all.
    fn reserve_n(&self, size: u64, count: u64) {
        let now = self.held.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.reserves.fetch_add(count, Ordering::Relaxed);
    }

    /// One physical allocation of `size` bytes.
    pub fn reserve(&self, size: u64) {
        self.reserve_n(size, 1);
    }

    fn release_n(&self, size: u64, count: u64) {
        self.held.fetch_sub(size, Ordering::Relaxed);
        self.releases.fetch_add(count, Ordering::Relaxed);
    }

    /// One physical allocation of `size` bytes returned.
    pub fn release(&self, size: u64) {
        self.release_n(size, 1);
    }

    fn mapped(&self, maps: u64, unmaps: u64) {
        self.maps.fetch_add(maps, Ordering::Relaxed);
        self.unmaps.fetch_add(unmaps, Ordering::Relaxed);
    }

    /// Mappings made (in-place devices: one per physical allocation mapped).
    pub fn maps(&self) -> u64 {
        self.maps.load(Ordering::Relaxed)
    }

    /// Mappings removed.
    pub fn unmaps(&self) -> u64 {
        self.unmaps.load(Ordering::Relaxed)
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

/// A backend whose blocks are numbers: no memory, no queue.
///
/// Its in-place growth counts as CUDA's virtual memory management would call the driver: one
/// physical allocation and one mapping per growth, or, on a device that offers holes, one per
/// granule (`cuMemUnmap` takes whole allocations, so a granule that may be decommitted alone is
/// an allocation of its own); a remap unmaps and maps each granule it moves, creating nothing.
/// Below CUDA's 2 MiB granularity (`--granularity`, a model of the host's pages) every call
/// counts once, as the host's `mprotect` and `madvise` take whole ranges.
pub struct CountingBackend {
    caps: Capabilities,
    /// Offered growth in place, if any.
    growth: Option<InPlaceGrowth>,
    counters: Arc<Counters>,
    blocks: Mutex<HashMap<u64, Blk>>,
    next: AtomicU64,
}

/// A counting block: its size (the extent, for a reserved block) and which of its granules are
/// decommitted holes.
#[derive(Default)]
struct Blk {
    size: u64,
    holes: Vec<bool>,
    /// Reserved through `reserve_block` (mapped in place), not `alloc_block`.
    in_place: bool,
}

impl Blk {
    /// Marks granules `[offset, offset + size)` (of `g` bytes) as holes or not; returns the
    /// bytes whose state changed.
    fn mark(&mut self, offset: u64, size: u64, g: u64, hole: bool) -> u64 {
        let (a, b) = ((offset / g) as usize, ((offset + size) / g) as usize);
        if self.holes.len() < b {
            self.holes.resize(b, false);
        }
        let changed = self.holes[a..b].iter().filter(|h| **h != hole).count() as u64;
        self.holes[a..b].fill(hole);
        changed * g
    }

    /// Committed bytes in `[offset, end)`.
    fn committed(&self, offset: u64, end: u64, g: u64) -> u64 {
        let holes = (offset / g..end / g)
            .filter(|i| self.holes.get(*i as usize).copied().unwrap_or(false))
            .count() as u64;
        end - offset - holes * g
    }
}

impl CountingBackend {
    pub fn new(counters: Arc<Counters>, mode: Mode) -> Self {
        CountingBackend {
            growth: (mode != Mode::Blocks).then_some(InPlaceGrowth {
                granularity: granularity(),
                max_reserve: 1 << 40,
                holes: mode == Mode::Holes,
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

    /// Physical allocations (and mappings) behind one call over `bytes`: one per granule with
    /// holes on a device of CUDA's granularity or coarser, else one (the host maps and
    /// `madvise`s a whole range with one call).
    fn units(&self, bytes: u64) -> u64 {
        match self.growth {
            Some(g) if g.holes && g.granularity >= GRANULARITY => bytes / g.granularity,
            _ => u64::from(bytes > 0),
        }
    }

    /// Marks a range of a block as holes or not; returns the bytes whose state changed.
    fn mark(&self, block: BlockId, offset: u64, size: u64, hole: bool) -> Result<u64> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let b = blocks
            .get_mut(&block.0)
            .ok_or_else(|| Error::invalid(format!("unknown block {}", block.0)))?;
        if offset + size > b.size {
            return Err(Error::invalid("hole past the block's extent"));
        }
        Ok(b.mark(offset, size, granularity(), hole))
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
            .insert(
                id,
                Blk {
                    size: desc.size,
                    ..Blk::default()
                },
            );
        self.counters.reserve(desc.size);
        Ok(BlockId(id))
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let b = self
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&block.0)
            .ok_or_else(|| Error::invalid(format!("unknown block {}", block.0)))?;
        let g = granularity();
        let committed = b.committed(0, b.size, g);
        if b.in_place {
            let n = self.units(committed);
            self.counters.release_n(committed, n);
            self.counters.mapped(0, n);
        } else {
            self.counters.release(committed);
        }
        Ok(())
    }

    fn in_place_growth(&self) -> Option<InPlaceGrowth> {
        self.growth
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, _reserve: u64) -> Result<BlockId> {
        if self.growth.is_none() {
            return Err(Self::unsupported("in-place growth"));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Blk {
                    size: desc.size,
                    holes: Vec::new(),
                    in_place: true,
                },
            );
        let n = self.units(desc.size);
        self.counters.reserve_n(desc.size, n);
        self.counters.mapped(n, 0);
        Ok(BlockId(id))
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let b = blocks
            .get_mut(&block.0)
            .ok_or_else(|| Error::invalid(format!("unknown block {}", block.0)))?;
        let g = granularity();
        // A growth maps new memory; a shrink unmaps what the cut range still holds.
        if size > b.size {
            let n = self.units(size - b.size);
            self.counters.reserve_n(size - b.size, n);
            self.counters.mapped(n, 0);
        } else {
            let gone = b.committed(size, b.size, g);
            let n = self.units(gone);
            self.counters.release_n(gone, n);
            self.counters.mapped(0, n);
            b.holes.truncate((size / g) as usize);
        }
        b.size = size;
        Ok(size)
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let changed = self.mark(block, offset, size, true)?;
        let n = self.units(changed);
        self.counters.release_n(changed, n);
        self.counters.mapped(0, n);
        Ok(())
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let changed = self.mark(block, offset, size, false)?;
        let n = self.units(changed);
        self.counters.reserve_n(changed, n);
        self.counters.mapped(n, 0);
        Ok(())
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        let gone = self.mark(block, from, size, true)?;
        let back = self.mark(block, to, size, false)?;
        if gone != size || back != size {
            return Err(Error::invalid(format!(
                "remap of {size} bytes from {from} to {to}: {gone} were committed, {back} not"
            )));
        }
        let n = self.units(size);
        self.counters.mapped(n, n);
        Ok(())
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
