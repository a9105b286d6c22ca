//! The belt's blocks: taking a ring region (reclaim, grow, or wait), retiring it with a ticket,
//! and returning blocks to the backend (idle trim and pressure).

use crate::time::Instant;

use crate::backend::{BlockDesc, BlockId, MemoryKind, Ticket, Waiting};
use crate::suballoc::{Region, RingAllocator};
use crate::trace::EventKind;
use crate::{Error, Result};

use super::{BeltBlock, StagingBelt, State};

impl StagingBelt {
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

    /// Retires `region` of block `id` in the belt of `kind` with `ticket`.
    pub(super) fn retire(
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
            Some(block) => Ok(block.ring.retire(region, ticket.0)?),
            // Blocks are only released when their ring is empty, and this region is live.
            None => Err(Error::invariant(
                "a staging block with a live region stays in its belt",
                format!("block {} was released", id.0),
            )),
        }
    }

    /// A ring region of `size` bytes in the belt of `kind`, waiting (in `waiting`'s mode) for the
    /// oldest work while every block is busy and the belt cannot grow.
    pub(super) async fn region(
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
    pub(super) fn trim_idle(&self, st: &mut State) -> Result<()> {
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

    /// Returns the blocks `drop_it` picks (given the belt's length and the block). Returns the bytes
    /// released; a block the backend refuses to take back stays.
    pub(super) fn release(
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
}

/// Outcome of [`StagingBelt::take_region`].
enum Taken {
    /// Block index in its belt, and the region.
    Region(usize, Region),
    /// Every block is busy and the belt is at `max_blocks`: wait for this ticket.
    Stalled(Ticket),
}
