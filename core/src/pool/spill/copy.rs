//! How a spill's bytes move between a device range and host memory: mapped where device memory
//! is host-visible, else through a `Readback` or `Upload` block allocated for the one copy.

use super::SpillPool;
use crate::Result;
use crate::backend::{BlockDesc, BlockRange, MemoryKind};

impl SpillPool {
    /// Copies a device range to host memory (all work on it has completed).
    pub(super) fn read(&self, range: BlockRange) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; range.size as usize];
        if self.backend.capabilities().device_host_visible {
            self.backend
                .read_mapped(range.block, range.offset, &mut buf)?;
            return Ok(buf);
        }
        self.staged(
            MemoryKind::Readback,
            range.size,
            "tensormem spill (out)",
            |staged| {
                let t = self.backend.copy(range, staged)?;
                self.backend.wait(t)?;
                self.backend.read_mapped(staged.block, 0, &mut buf)
            },
        )?;
        Ok(buf)
    }

    /// Copies host bytes into a device range; returns after they are in place.
    pub(super) fn write(&self, range: BlockRange, bytes: &[u8]) -> Result<()> {
        if self.backend.capabilities().device_host_visible {
            return self.backend.write_mapped(range.block, range.offset, bytes);
        }
        self.staged(
            MemoryKind::Upload,
            range.size,
            "tensormem spill (in)",
            |staged| {
                self.backend.write_mapped(staged.block, 0, bytes)?;
                let t = self.backend.copy(staged, range)?;
                self.backend.wait(t)
            },
        )
    }

    /// Runs `work` on a whole block of `kind` and `size` bytes, allocated for it and freed after
    /// it whatever the outcome: the bounce buffer of a device that maps no device memory. The
    /// first error is the one returned.
    fn staged(
        &self,
        kind: MemoryKind,
        size: u64,
        label: &str,
        work: impl FnOnce(BlockRange) -> Result<()>,
    ) -> Result<()> {
        let block = self.backend.alloc_block(&BlockDesc { kind, size, label })?;
        let done = work(BlockRange {
            block,
            offset: 0,
            size,
        });
        let freed = self.backend.free_block(block);
        done.and(freed)
    }
}
