//! The devices the pools run on in the bench: blocks that are numbers, counted. Our pool runs
//! over [`CountingBackend`] and cubecl's memory management over a counting storage (in
//! `peers.rs`); both report to [`Counters`], so the ratios measure the pools' policies and
//! bookkeeping alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tensormem::backend::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, DeviceType, Growable, InPlaceGrowth,
    Ticket,
};
use tensormem::{Error, GrowthError, Op, Result};

use crate::peers::{ALIGN, GRANULARITY, MAX_BLOCK, Mode, granularity};

mod growable;

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
/// Its in-place growth counts what the backend it models creates and calls:
/// * **CUDA** (a granularity of 2 MiB or more, CUDA's virtual memory management): one physical
///   allocation (`cuMemCreate`) and one mapping per call that backs memory (a reservation's
///   first size, a growth, a commit): a *unit* ([`InPlaceGrowth::whole_units`]). A decommit
///   unmaps and releases each unit in its range, a remap unmaps and maps each unit it moves,
///   creating nothing, and a shrink keeps the unit that holds the new end. A range that cuts a
///   unit is refused, as `cuMemUnmap` refuses part of a mapping: the bench checks that the pool
///   keeps to whole units.
/// * **Host** (below 2 MiB, `--granularity`, a model of the host's pages): the reservation is
///   the one creation (`mmap`); growth and shrinking are one `mprotect` each, a decommit or a
///   remap one `madvise` of the range given back, and a commit no call at all (pages come back
///   on first touch). Commits are not creations.
pub struct CountingBackend {
    /// Whether the holes calls keep the books (which granules are holes, the counters). Off for
    /// the timed replays of our pools: those calls then return at once, so the time measured is
    /// the pool's own, not this model's (a driver's page-table work is not what it costs
    /// either). The bench times the replay with the books on too, and prints the difference.
    books: bool,
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
    /// Bit `i` set: granule `i` is a hole. Words of 64 granules, so marking a range costs what a
    /// driver's page-table update of it would, a word at a time, not a bool per granule: the
    /// device's own bookkeeping stays small beside the pool's (the time ratios measure the pool).
    holes: Vec<u64>,
    /// Reserved through `reserve_block` (mapped in place), not `alloc_block`.
    in_place: bool,
    /// CUDA's units of an in-place block: size by offset (each one physical allocation).
    units: BTreeMap<u64, u64>,
}

/// The bits of word `w` that lie in granules `[a, b)`.
fn word_mask(w: u64, a: u64, b: u64) -> u64 {
    let lo = a.max(w * 64) - w * 64;
    let hi = b.min(w * 64 + 64) - w * 64;
    let top = if hi == 64 { !0 } else { (1u64 << hi) - 1 };
    top & !((1u64 << lo) - 1)
}

impl Blk {
    /// Marks granules `[offset, offset + size)` (of `g` bytes) as holes or not; returns the
    /// bytes whose state changed.
    fn mark(&mut self, offset: u64, size: u64, g: u64, hole: bool) -> u64 {
        let (a, b) = (offset / g, (offset + size) / g);
        if a >= b {
            return 0;
        }
        if (self.holes.len() as u64) < b.div_ceil(64) {
            self.holes.resize(b.div_ceil(64) as usize, 0);
        }
        let mut changed = 0;
        for w in a / 64..=(b - 1) / 64 {
            let m = word_mask(w, a, b);
            let old = self.holes[w as usize];
            let new = if hole { old | m } else { old & !m };
            changed += u64::from((old ^ new).count_ones());
            self.holes[w as usize] = new;
        }
        changed * g
    }

    /// Committed bytes in `[offset, end)` (whole granules of `g` bytes).
    fn committed(&self, offset: u64, end: u64, g: u64) -> u64 {
        let (a, b) = (offset / g, end / g);
        let holes: u64 = (a < b)
            .then(|| a / 64..=(b - 1) / 64)
            .into_iter()
            .flatten()
            .map(|w| {
                let word = self.holes.get(w as usize).copied().unwrap_or(0);
                u64::from((word & word_mask(w, a, b)).count_ones())
            })
            .sum();
        end - offset - holes * g
    }

    /// The units inside `[offset, offset + size)`, as (offset, size); an error when one is cut
    /// by the range's ends (`cuMemUnmap` takes whole mappings).
    fn units_in(&self, offset: u64, size: u64) -> Result<Vec<(u64, u64)>> {
        let end = offset + size;
        let cut = |at: u64| {
            self.units
                .range(..at)
                .next_back()
                .is_some_and(|(o, n)| o + n > at)
        };
        if cut(offset) || cut(end) {
            return Err(GrowthError::CutsUnit {
                call: "counting backend",
                offset,
                size,
            }
            .into());
        }
        Ok(self
            .units
            .range(offset..end)
            .map(|(o, n)| (*o, *n))
            .collect())
    }

    /// Forgets the granules at and past granule `len`.
    fn truncate(&mut self, len: u64) {
        self.holes.truncate(len.div_ceil(64) as usize);
        if let Some(last) = self.holes.last_mut()
            && !len.is_multiple_of(64)
        {
            *last &= (1u64 << (len % 64)) - 1;
        }
    }
}

impl CountingBackend {
    pub fn new(counters: Arc<Counters>, mode: Mode) -> Self {
        CountingBackend {
            books: true,
            growth: (mode != Mode::Blocks).then_some(InPlaceGrowth {
                granularity: granularity(),
                max_reserve: 1 << 40,
                holes: mode == Mode::Holes,
                whole_units: granularity() >= GRANULARITY,
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
                host_visible_copies: false,
                host_placement: tensormem::HostPlacement::default(),
            },
            counters,
            blocks: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// The same device whose holes calls keep no books (for timing the pool alone).
    pub fn without_books(self) -> Self {
        CountingBackend {
            books: false,
            ..self
        }
    }

    /// Whether the in-place device models the host (pages below CUDA's granularity).
    fn host(&self) -> bool {
        self.growth.is_some_and(|g| g.granularity < GRANULARITY)
    }

    /// Runs `f` on a block.
    fn with<T>(&self, block: BlockId, f: impl FnOnce(&mut Blk) -> Result<T>) -> Result<T> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let b = blocks.get_mut(&block.0).ok_or(Error::UnknownBlock {
            backend: "counting",
            block: block.0,
        })?;
        f(b)
    }

    /// Marks a range of a block as holes or not; returns the bytes whose state changed.
    fn mark(&self, block: BlockId, offset: u64, size: u64, hole: bool) -> Result<u64> {
        self.with(block, |b| {
            if offset + size > b.size {
                return Err(Error::OutOfBounds {
                    what: "block's extent",
                    offset,
                    size,
                    limit: b.size,
                });
            }
            Ok(b.mark(offset, size, granularity(), hole))
        })
    }

    /// The host model's `decommit_range` (`from` alone), `commit_range` (`to` alone) and
    /// `remap_range` (both): one `madvise` of the range given back; a commit makes no call
    /// (pages come back on first touch) and a remap moves no memory.
    fn host_holes(
        &self,
        block: BlockId,
        from: Option<u64>,
        to: Option<u64>,
        size: u64,
    ) -> Result<()> {
        let gone = from.map_or(Ok(0), |f| self.mark(block, f, size, true))?;
        let back = to.map_or(Ok(0), |t| self.mark(block, t, size, false))?;
        match (from, to) {
            (Some(f), Some(_)) if gone != size => Err(GrowthError::NotBacked {
                call: "the source of remap_range",
                offset: f,
                size,
            }
            .into()),
            (Some(_), Some(t)) if back != size => Err(GrowthError::NotAHole {
                call: "the target of remap_range",
                offset: t,
                size,
            }
            .into()),
            (Some(_), Some(_)) => {
                self.counters.mapped(0, 1);
                Ok(())
            }
            (Some(_), None) => {
                self.counters.release_n(gone, 0);
                self.counters.mapped(0, u64::from(gone > 0));
                Ok(())
            }
            _ => {
                self.counters.reserve_n(back, 0);
                Ok(())
            }
        }
    }

    /// Registers `blk` under a fresh block id.
    fn add_block(&self, blk: Blk) -> BlockId {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, blk);
        BlockId(id)
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
        let id = self.add_block(Blk {
            size: desc.size,
            ..Blk::default()
        });
        self.counters.reserve(desc.size);
        Ok(id)
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let b = self
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&block.0)
            .ok_or(Error::UnknownBlock {
                backend: "counting",
                block: block.0,
            })?;
        if b.in_place && self.host() {
            // One `munmap` returns the reservation.
            self.counters
                .release_n(b.committed(0, b.size, granularity()), 1);
            self.counters.mapped(0, 1);
        } else if b.in_place {
            let n = b.units.len() as u64;
            self.counters.release_n(b.units.values().sum(), n);
            self.counters.mapped(0, n);
        } else {
            self.counters.release(b.size);
        }
        Ok(())
    }

    fn extensions(&self) -> tensormem::Extensions<'_> {
        tensormem::Extensions {
            growable: self.growth.map(|_| self as &dyn Growable),
            ..tensormem::Extensions::default()
        }
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
