//! A bottom pool's blocks from reservation to return: a fresh block carved and installed, a
//! region returned to its block, completed frees reclaimed, and empty blocks returned to the
//! backend (idle ones on a miss, all of them on a trim). Counters, budget and listener follow
//! every change.

use super::carved::{Block, Carved, Kind, State};
use super::carving::Carving;
use crate::backend::BlockId;
use crate::pool::slots::Handle;
use crate::suballoc::Region;
use crate::time::Instant;
use crate::{Error, Result};

impl<K: Kind> Carved<K> {
    /// Returns a region to its block's carving and tells the listener.
    pub(super) fn release(
        &self,
        st: &mut State<K>,
        block: usize,
        region: Region,
        handle: Handle,
    ) -> Result<()> {
        let Some(b) = st.blocks.get_mut(block).and_then(Option::as_mut) else {
            return Err(Error::invariant(
                "an allocation's block is live",
                format!("block {block}"),
            ));
        };
        let freed = (region.offset, region.size);
        let merged = b.carving.free_merged(region)?;
        if b.carving.is_empty() {
            b.idle_since = Some(Instant::now());
        }
        K::released(self, st, block, freed, merged)?;
        self.notify(|l| l.reclaimed(handle));
        Ok(())
    }

    pub(super) fn reclaim_locked(&self, st: &mut State<K>) -> Result<()> {
        if st.deferred.bytes() == 0 {
            return Ok(());
        }
        let completed = Self::remember_loss(st, self.backend.completed())?;
        for (block, region, handle) in st.deferred.reclaim(completed) {
            self.release(st, block, region, handle)?;
        }
        st.stats.pending_free = st.deferred.bytes();
        Ok(())
    }

    /// Puts a fresh block in a free slot and counts it; its index.
    pub(super) fn install(
        &self,
        st: &mut State<K>,
        id: BlockId,
        bytes: u64,
        carving: Carving,
        role: K::Role,
    ) -> usize {
        let idx = match st.blocks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                st.blocks.push(None);
                st.blocks.len() - 1
            }
        };
        st.blocks[idx] = Some(Block {
            id,
            size: bytes,
            carving,
            idle_since: None,
            role,
        });
        self.notify(|l| l.block_reserved(&self.config.name, id, bytes));
        self.count_reserved(&mut st.stats, 0, bytes);
        let s = &mut st.stats;
        s.blocks += 1;
        s.blocks_allocated += 1;
        idx
    }

    /// A carving of `bytes` for a fresh block, with a request of `size` at `align` carved in
    /// it. On failure the charge of `bytes` and the block `id` are given back.
    pub(super) fn carve_fresh(
        &self,
        id: BlockId,
        bytes: u64,
        size: u64,
        align: u64,
    ) -> Result<(Carving, Region)> {
        let carved = Carving::new(self.config.carver, bytes, self.base_align).and_then(|mut c| {
            let region = c.allocate(size, align)?.ok_or_else(|| {
                Error::invariant(
                    "a fresh block fits its request",
                    format!("{size} bytes at alignment {align}"),
                )
            })?;
            Ok((c, region))
        });
        if carved.is_err() {
            self.budget.release(bytes);
            let _ = self.backend.free_block(id);
        }
        carved
    }

    /// Returns one empty block to the backend; on failure the block stays in the pool.
    pub(super) fn release_block(&self, st: &mut State<K>, index: usize) -> Result<u64> {
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return Ok(0);
        };
        let (id, size) = (b.id, b.committed());
        Self::remember_loss(st, self.backend.free_block(id))?;
        st.blocks[index] = None;
        self.budget.release(size);
        self.count_reserved(&mut st.stats, size, 0);
        st.stats.blocks -= 1;
        st.stats.blocks_freed += 1;
        self.notify(|l| l.block_released(&self.config.name, id, size));
        Ok(size)
    }

    /// Returns blocks empty for at least [`ArenaConfig::idle_release`] (on a miss, before the
    /// pool grows). A block the backend refuses to take back stays.
    pub(super) fn release_idle(&self, st: &mut State<K>) {
        let Some(idle) = self.config.idle_release else {
            return;
        };
        for i in 0..st.blocks.len() {
            let expired = st.blocks[i].as_ref().is_some_and(|b| {
                b.carving.is_empty() && b.idle_since.is_some_and(|t| t.elapsed() >= idle)
            });
            if expired {
                let _ = self.release_block(st, i);
            }
        }
    }

    pub(super) fn trim_locked(&self, st: &mut State<K>) -> Result<u64> {
        self.reclaim_locked(st)?;
        // Blocks with pending frees are not empty in their carving, so they are kept.
        let mut released = 0;
        for i in 0..st.blocks.len() {
            if st.blocks[i].as_ref().is_some_and(|b| b.carving.is_empty()) {
                released += self.release_block(st, i)?;
            }
        }
        Ok(released + K::trimmed(self, st)?)
    }
}
