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

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crate::time::Instant;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{
    Backend, BlockDesc, BlockId, BlockRange, HostAccess, MemoryKind, Ticket, Waiting,
};
use crate::pool::budget::{Budget, MemberId, Reclaim};
use crate::suballoc::{Region, RingAllocator};
use crate::trace::{EventKind, Tracer};
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

    /// Allocates a belt block; when the driver is out of memory, returns this belt's empty blocks
    /// and asks the runtime's other pools for theirs, then tries once more.
    fn alloc_block(&self, st: &mut State, kind: MemoryKind) -> Result<BlockId> {
        let desc = BlockDesc {
            kind,
            size: self.config.block_size,
            label: "tensormem staging belt",
        };
        match self.backend.alloc_block(&desc) {
            Err(Error::OutOfMemory(report)) => {
                let own = self.release(st, |_, b| b.ring.is_empty())?;
                // The belt's lock is held: the budget skips the belt (see `pool::budget`).
                let others = match self.pressure.get() {
                    Some((budget, id)) => budget.relieve(Some(*id))?,
                    None => 0,
                };
                if own + others == 0 {
                    return Err(Error::OutOfMemory(report));
                }
                self.backend.alloc_block(&desc)
            }
            r => r,
        }
    }

    /// Copies `data` into `dst` (a device range at least `data.len()` bytes, rounded up to the copy
    /// alignment) through the belt. Returns the ticket of the last chunk's copy. Native only; see
    /// [`StagingBelt::upload_async`].
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`] when `dst` is too small, backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload(&self, dst: BlockRange, data: &[u8]) -> Result<Ticket> {
        complete_now(self.upload_with(Waiting::Blocking, dst, data))
    }

    /// [`StagingBelt::upload`] without blocking: a full belt and the mapping of its blocks are
    /// awaited.
    ///
    /// # Errors
    /// As [`StagingBelt::upload`].
    pub async fn upload_async(&self, dst: BlockRange, data: &[u8]) -> Result<Ticket> {
        self.upload_with(Waiting::Async, dst, data).await
    }

    /// The one upload path. The belt's lock is never held across an await: a region taken from a
    /// ring stays allocated (not retired) while the chunk is written, so nothing else reuses it.
    pub(crate) async fn upload_with(
        &self,
        waiting: Waiting,
        dst: BlockRange,
        data: &[u8],
    ) -> Result<Ticket> {
        if data.is_empty() {
            return Err(Error::ZeroSize { what: "upload" });
        }
        let padded = round_up(data.len() as u64, self.align);
        if padded > dst.size {
            return Err(Error::OutOfBounds {
                what: "upload destination",
                offset: 0,
                size: padded,
                limit: dst.size,
            });
        }
        let chunk = self.config.block_size as usize;
        let mut ticket = Ticket::DONE;
        let mut scratch = Vec::new();
        for (i, part) in data.chunks(chunk).enumerate() {
            let size = round_up(part.len() as u64, self.align);
            let bytes: &[u8] = if size as usize == part.len() {
                part
            } else {
                scratch.clear();
                scratch.extend_from_slice(part);
                scratch.resize(size as usize, 0);
                &scratch
            };
            let (id, region) = self.region(waiting, MemoryKind::Upload, size).await?;
            let backend = self.backend.as_ref();
            let mapped = waiting.host_access(backend, id, HostAccess::Write).await;
            let copied = mapped
                .and_then(|()| backend.write_mapped(id, region.offset, bytes))
                .and_then(|()| {
                    backend.copy(
                        BlockRange {
                            block: id,
                            offset: region.offset,
                            size,
                        },
                        BlockRange {
                            block: dst.block,
                            offset: dst.offset + (i * chunk) as u64,
                            size,
                        },
                    )
                });
            // Retire the region whatever happened: on error with the last good ticket, so the ring
            // never keeps a region that nothing will release.
            let t = *copied.as_ref().unwrap_or(&ticket);
            let mut st = self.lock();
            Self::retire(&mut st, MemoryKind::Upload, id, region, t)?;
            ticket = copied?;
            st.stats.uploaded += part.len() as u64;
            st.stats.chunks += 1;
        }
        let mut st = self.lock();
        self.trim_idle(&mut st)?;
        Ok(ticket)
    }

    /// Copies `out.len()` bytes from `src` (a device range) into `out` through the belt. Blocks
    /// until the data has arrived. Work enqueued earlier is ordered before the copy. Native only;
    /// see [`StagingBelt::download_async`].
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`] when `src` is too small, backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download(&self, src: BlockRange, out: &mut [u8]) -> Result<()> {
        complete_now(self.download_with(Waiting::Blocking, src, out))
    }

    /// [`StagingBelt::download`] without blocking: each chunk's copy and the mapping of its
    /// readback block are awaited.
    ///
    /// # Errors
    /// As [`StagingBelt::download`].
    pub async fn download_async(&self, src: BlockRange, out: &mut [u8]) -> Result<()> {
        self.download_with(Waiting::Async, src, out).await
    }

    /// The one readback path; as [`StagingBelt::upload_with`], no lock is held across an await and
    /// a region is retired only after its bytes were read out.
    pub(crate) async fn download_with(
        &self,
        waiting: Waiting,
        src: BlockRange,
        out: &mut [u8],
    ) -> Result<()> {
        if out.is_empty() {
            return Err(Error::ZeroSize { what: "download" });
        }
        let padded = round_up(out.len() as u64, self.align);
        if padded > src.size {
            return Err(Error::OutOfBounds {
                what: "download source",
                offset: 0,
                size: padded,
                limit: src.size,
            });
        }
        let chunk = self.config.block_size as usize;
        let mut scratch = Vec::new();
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let size = round_up(part.len() as u64, self.align);
            let (id, region) = self.region(waiting, MemoryKind::Readback, size).await?;
            let backend = self.backend.as_ref();
            let copied = backend.copy(
                BlockRange {
                    block: src.block,
                    offset: src.offset + (i * chunk) as u64,
                    size,
                },
                BlockRange {
                    block: id,
                    offset: region.offset,
                    size,
                },
            );
            let result = match copied {
                Ok(t) => {
                    let read = async {
                        waiting.ticket(backend, t).await?;
                        waiting.host_access(backend, id, HostAccess::Read).await?;
                        if size as usize == part.len() {
                            backend.read_mapped(id, region.offset, part)
                        } else {
                            scratch.resize(size as usize, 0);
                            backend.read_mapped(id, region.offset, &mut scratch)?;
                            part.copy_from_slice(&scratch[..part.len()]);
                            Ok(())
                        }
                    };
                    read.await.map(|()| t)
                }
                Err(e) => Err(e),
            };
            let t = *result.as_ref().unwrap_or(&Ticket::DONE);
            let mut st = self.lock();
            Self::retire(&mut st, MemoryKind::Readback, id, region, t)?;
            result?;
            st.stats.downloaded += part.len() as u64;
            st.stats.chunks += 1;
        }
        let mut st = self.lock();
        self.trim_idle(&mut st)?;
        Ok(())
    }

    /// Retires `region` of block `id` in the belt of `kind` with `ticket`.
    fn retire(
        st: &mut State,
        kind: MemoryKind,
        id: BlockId,
        region: Region,
        ticket: Ticket,
    ) -> Result<()> {
        let belt = match kind {
            MemoryKind::Readback => &mut st.readback,
            _ => &mut st.upload,
        };
        match belt.blocks.iter_mut().find(|b| b.id == id) {
            Some(block) => block.ring.retire(region, ticket.0),
            // Blocks are only released when their ring is empty, and this region is live.
            None => Err(Error::invalid(format!(
                "staging belt: block {} of a live region was released",
                id.0
            ))),
        }
    }

    /// A ring region of `size` bytes in the belt of `kind`, waiting (in `waiting`'s mode) for the
    /// oldest work while every block is busy and the belt cannot grow.
    async fn region(
        &self,
        waiting: Waiting,
        kind: MemoryKind,
        size: u64,
    ) -> Result<(BlockId, Region)> {
        loop {
            let stalled = {
                let mut st = self.lock();
                match self.take_region(&mut st, kind, size)? {
                    Taken::Region(b, region) => {
                        let belt = match kind {
                            MemoryKind::Readback => &st.readback,
                            _ => &st.upload,
                        };
                        return Ok((belt.blocks[b].id, region));
                    }
                    Taken::Stalled(t) => {
                        st.stats.stalls += 1;
                        t
                    }
                }
            };
            // Every block is busy: wait for all submitted work, then everything is reclaimable.
            waiting.ticket(self.backend.as_ref(), stalled).await?;
        }
    }

    /// A ring region of `size` bytes in the belt of `kind`: reclaim, then grow; when neither
    /// works, the ticket to wait for (everything submitted so far).
    fn take_region(&self, st: &mut State, kind: MemoryKind, size: u64) -> Result<Taken> {
        let completed = self.backend.completed()?;
        let belt = match kind {
            MemoryKind::Readback => &mut st.readback,
            _ => &mut st.upload,
        };
        let now = Instant::now();
        let n = belt.blocks.len();
        for k in 0..n {
            let i = (belt.current + k) % n;
            let block = &mut belt.blocks[i];
            block.ring.reclaim(completed.0);
            if let Some(region) = block.ring.allocate(size, self.align)? {
                block.last_active = now;
                belt.current = i;
                return Ok(Taken::Region(i, region));
            }
        }
        if n < self.config.max_blocks {
            let kind = belt.kind;
            let id = self.alloc_block(st, kind)?;
            let belt = match kind {
                MemoryKind::Readback => &mut st.readback,
                _ => &mut st.upload,
            };
            belt.blocks.push(BeltBlock {
                id,
                ring: RingAllocator::new(self.config.block_size)?,
                last_active: now,
            });
            belt.current = n;
            if let Some(t) = &st.tracer {
                t.record(EventKind::BlockReserve {
                    pool: format!("staging ({})", kind.name()),
                    block: id.0,
                    size: self.config.block_size,
                });
            }
            st.stats.blocks += 1;
            st.stats.reserved += self.config.block_size;
            st.stats.blocks_allocated += 1;
            return self.take_region(st, kind, size);
        }
        Ok(Taken::Stalled(self.backend.flush()?))
    }

    /// Returns blocks beyond `keep_blocks` that are empty and idle longer than `idle_trim_after`.
    fn trim_idle(&self, st: &mut State) -> Result<()> {
        let now = Instant::now();
        let keep = self.config.keep_blocks;
        let idle = self.config.idle_trim_after;
        let completed = self.backend.completed()?;
        self.release(st, |belt_len, b| {
            b.ring.reclaim(completed.0);
            belt_len > keep && b.ring.is_empty() && now.duration_since(b.last_active) >= idle
        })?;
        Ok(())
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

    /// Returns the blocks `drop_it` picks (given the belt's length and the block). Returns the bytes
    /// released; a block the backend refuses to take back stays.
    fn release(
        &self,
        st: &mut State,
        mut drop_it: impl FnMut(usize, &mut BeltBlock) -> bool,
    ) -> Result<u64> {
        let mut released = 0;
        for which in [MemoryKind::Upload, MemoryKind::Readback] {
            let belt = match which {
                MemoryKind::Readback => &mut st.readback,
                _ => &mut st.upload,
            };
            let mut i = 0;
            while i < belt.blocks.len() {
                if drop_it(belt.blocks.len(), &mut belt.blocks[i]) {
                    self.backend.free_block(belt.blocks[i].id)?;
                    let b = belt.blocks.remove(i);
                    released += self.config.block_size;
                    if let Some(t) = &st.tracer {
                        t.record(EventKind::BlockRelease {
                            pool: format!("staging ({})", which.name()),
                            block: b.id.0,
                            size: self.config.block_size,
                        });
                    }
                    st.stats.blocks -= 1;
                    st.stats.reserved -= self.config.block_size;
                    st.stats.blocks_freed += 1;
                    belt.current = 0;
                } else {
                    i += 1;
                }
            }
        }
        Ok(released)
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

/// Outcome of [`StagingBelt::take_region`].
enum Taken {
    /// Block index in its belt, and the region.
    Region(usize, Region),
    /// Every block is busy and the belt is at `max_blocks`: wait for this ticket.
    Stalled(Ticket),
}

fn round_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

#[cfg(test)]
mod tests;
