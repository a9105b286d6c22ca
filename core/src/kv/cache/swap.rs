//! Swapping a preempted sequence's blocks to host memory and back (native only: the copies
//! block, which a browser's thread may not; there the cache preempts by recomputation). The
//! blocks are read in runs of adjacent blocks (one transfer per run) into a host buffer, reused
//! from an earlier swap when one is spare, and written back bit-identical on resume.

use super::KvCache;
use crate::Result;
use crate::kv::{Preemption, Resumed, SeqId};

impl KvCache {
    /// Copies `seq`'s resident blocks (`table`) to host memory.
    pub(super) fn swap_out(&mut self, seq: SeqId, table: &[u32]) -> Result<()> {
        // A host buffer of an earlier swap is reused: no page faults on its bytes.
        let mut bytes = self.host_spare.pop().unwrap_or_default();
        if let Err(e) = self.segments.read_blocks_into(&self.rt, table, &mut bytes) {
            self.host_spare.push(bytes);
            return Err(e);
        }
        self.host.insert(seq, bytes);
        Ok(())
    }

    /// Writes a swapped `seq`'s blocks back into the blocks `resumed` gave it (only those not
    /// found in the prefix cache). A sequence that was not swapped has nothing to restore.
    pub(super) fn swap_in(&mut self, seq: SeqId, resumed: &Resumed) -> Result<()> {
        if let Some(bytes) = self.host.remove(&seq) {
            let bb = self.config.geometry.block_bytes() as usize;
            let blocks: Vec<u32> = resumed.restore.iter().map(|&c| resumed.table[c]).collect();
            let written = if blocks.len() == resumed.table.len() {
                self.segments.write_blocks(&self.rt, &blocks, &bytes)
            } else {
                let copy: Vec<u8> = resumed
                    .restore
                    .iter()
                    .flat_map(|&c| &bytes[c * bb..(c + 1) * bb])
                    .copied()
                    .collect();
                self.segments.write_blocks(&self.rt, &blocks, &copy)
            };
            if let Err(e) = written {
                // Keep the host copy: the sequence goes back to swapped, nothing is lost.
                let _ = self.ledger.preempt(seq, Preemption::Swap);
                self.host.insert(seq, bytes);
                return Err(e);
            }
            if self.host_spare.len() < 2 {
                self.host_spare.push(bytes);
            }
        }
        Ok(())
    }
}
