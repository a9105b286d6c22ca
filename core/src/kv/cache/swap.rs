//! Swapping a preempted sequence's blocks to host memory and back over the backend's transfer
//! lane ([`crate::backend::lanes`]), native only (a browser's cache preempts by recomputation).
//!
//! * **Out.** The blocks are copied, one device copy per run of adjacent blocks, into a slot of
//!   the cache's own readback pool (pinned memory on CUDA, host-visible buffers elsewhere), on
//!   the transfer lane after the compute work that last touched them. The compute lane then
//!   joins the copies (`compute_after`), so a kernel that writes the freed blocks runs after
//!   they are read; the host never waits.
//! * **In.** Where readback memory may be a copy source
//!   ([`Capabilities::host_visible_copies`](crate::backend::Capabilities::host_visible_copies)),
//!   the blocks not found in the prefix cache are copied back from the slot the same way, and
//!   joined before the kernels that read them. Elsewhere (WebGPU: a `MAP_READ` buffer is no copy
//!   source) the host waits for the copy-out, reads the slot and writes the blocks through the
//!   runtime's write path.
//! * A slot holds whole strides, so a run is one copy on both sides; it is freed after the
//!   swap-in's (or the free's) last use. Copies on the lane are ordered among themselves, so a
//!   swap-in never overtakes its swap-out.

use std::sync::Arc;

use super::KvCache;
use crate::backend::MemoryKind;
use crate::backend::{Backend, BlockRange, Ticket, TransferTicket, lanes};
use crate::kv::{Preemption, Resumed, SeqId};
use crate::pool::{Allocation, ArenaConfig, ArenaPool, DevicePool};
use crate::{Error, Result};

/// A swapped sequence's blocks in the readback pool: block `c` of its table at `c × stride`.
pub(super) struct Swapped {
    slot: Allocation,
    /// The copy-out's last ticket on the transfer lane.
    out: TransferTicket,
}

impl Swapped {
    /// Host bytes the slot holds.
    pub(super) fn size(&self) -> u64 {
        self.slot.range.size
    }
}

impl KvCache {
    /// The readback pool swaps go to, made on the first swap.
    fn swap_pool(&mut self) -> Result<Arc<dyn DevicePool>> {
        if let Some(p) = &self.swap_pool {
            return Ok(p.clone());
        }
        let pool: Arc<dyn DevicePool> = Arc::new(ArenaPool::new(
            self.rt.backend().clone(),
            ArenaConfig::host_visible(MemoryKind::Readback),
        )?);
        self.swap_pool = Some(pool.clone());
        Ok(pool)
    }

    /// Copies `seq`'s resident blocks (`table`) to host memory on the transfer lane.
    pub(super) fn swap_out(&mut self, seq: SeqId, table: &[u32]) -> Result<()> {
        if table.is_empty() {
            return Ok(()); // nothing to copy; the resume has nothing to restore
        }
        let pool = self.swap_pool()?;
        let stride = self.segments.stride();
        let slot = pool.allocate(table.len() as u64 * stride, 1, "kv swap")?;
        let copied = self.copy_runs(&pool, slot, table, |c| c, Direction::Out);
        match copied {
            Ok(out) => {
                self.host.insert(seq, Swapped { slot, out });
                Ok(())
            }
            Err(e) => {
                // Copies already on the lane still read the blocks: the slot waits for them.
                if let Ok(t) = self.rt.backend().flush() {
                    let _ = pool.mark_used(slot.handle, t);
                }
                let _ = pool.free(slot.handle);
                Err(e)
            }
        }
    }

    /// Writes a swapped `seq`'s blocks back into the blocks `resumed` gave it (only those not
    /// found in the prefix cache). A sequence that was not swapped has nothing to restore.
    pub(super) fn swap_in(&mut self, seq: SeqId, resumed: &Resumed) -> Result<()> {
        let Some(swapped) = self.host.remove(&seq) else {
            return Ok(());
        };
        let pool = self.swap_pool()?;
        let blocks: Vec<u32> = resumed.restore.iter().map(|&c| resumed.table[c]).collect();
        let restored = if self.rt.backend().capabilities().host_visible_copies {
            let restore = &resumed.restore;
            self.copy_runs(&pool, swapped.slot, &blocks, |i| restore[i], Direction::In)
                .map(|_| ())
        } else {
            self.restore_through_host(pool.as_ref(), &swapped, resumed, &blocks)
        };
        if let Err(e) = restored {
            // Keep the host copy: the sequence goes back to swapped, nothing is lost.
            let _ = self.ledger.preempt(seq, Preemption::Swap);
            self.host.insert(seq, swapped);
            return Err(e);
        }
        pool.free(swapped.slot.handle)
    }

    /// Frees a swapped sequence's slot (after the copies that use it).
    pub(super) fn drop_swapped(&mut self, seq: SeqId) {
        if let (Some(s), Some(pool)) = (self.host.remove(&seq), &self.swap_pool) {
            let _ = pool.free(s.slot.handle);
        }
    }

    /// Copies `blocks[i]` to or from slot position `at(i)` on the transfer lane, one copy per
    /// run adjacent on both sides, after the compute work that last used the blocks; the compute
    /// lane joins the copies. Returns the last transfer ticket.
    fn copy_runs(
        &self,
        pool: &Arc<dyn DevicePool>,
        slot: Allocation,
        blocks: &[u32],
        at: impl Fn(usize) -> usize,
        dir: Direction,
    ) -> Result<TransferTicket> {
        let rt = &self.rt;
        let backend: &dyn Backend = rt.backend().as_ref();
        let lane = lanes::of(backend);
        let device = rt.device_pool();
        let stride = self.segments.stride();
        let whole = pool.resolve(slot.handle)?;
        let mut runs: Vec<(BlockRange, BlockRange)> = Vec::new();
        let mut after = Ticket::DONE;
        let mut i = 0;
        while i < blocks.len() {
            let mut len = 1;
            while i + len < blocks.len()
                && self.segments.adjacent(blocks[i + len - 1], blocks[i + len])
                && at(i + len) == at(i) + len
            {
                len += 1;
            }
            let (t, offset) = self.segments.locate(blocks[i])?;
            let bytes = len as u64 * stride;
            let (seg, _lease) =
                rt.sub_range(device.as_ref(), t.allocation(), offset, bytes, "kv swap")?;
            after = after.max(rt.last_use(device.as_ref(), t.allocation(), seg)?);
            let host = BlockRange {
                offset: whole.offset + at(i) as u64 * stride,
                size: bytes,
                ..whole
            };
            runs.push(match dir {
                Direction::Out => (seg, host),
                Direction::In => (host, seg),
            });
            i += len;
        }
        lane.transfer_after(after)?;
        let mut last = TransferTicket::DONE;
        for (src, dst) in runs {
            last = lane.transfer_copy(src, dst)?;
        }
        let joined = lane.compute_after(last)?;
        for t in self.segments.tensors() {
            device.mark_used(t.allocation().handle, joined)?;
        }
        pool.mark_used(slot.handle, joined)?;
        Ok(last)
    }

    /// The swap-in where readback memory is no copy source: wait for the copy-out, read the
    /// slot, write the blocks to restore through the runtime's write path.
    fn restore_through_host(
        &self,
        pool: &dyn DevicePool,
        swapped: &Swapped,
        resumed: &Resumed,
        blocks: &[u32],
    ) -> Result<()> {
        let backend: &dyn Backend = self.rt.backend().as_ref();
        lanes::of(backend).wait_transfer(swapped.out)?;
        backend.wait(pool.last_use(swapped.slot.handle)?)?;
        let range = pool.resolve(swapped.slot.handle)?;
        let stride = self.segments.stride() as usize;
        let mut bytes = vec![0u8; range.size as usize];
        backend.read_mapped(range.block, range.offset, &mut bytes)?;
        let bb = self.config.geometry.block_bytes() as usize;
        let mut out = Vec::with_capacity(blocks.len() * bb);
        for &c in &resumed.restore {
            let start = c * stride;
            let chunk = bytes.get(start..start + bb).ok_or_else(|| {
                Error::invariant("a swap slot holds every block", format!("block {c}"))
            })?;
            out.extend_from_slice(chunk);
        }
        self.segments.write_blocks(&self.rt, blocks, &out)
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Out,
    In,
}
