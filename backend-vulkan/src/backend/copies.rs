//! Recording copies and fills on either lane: the range checks, the lane's hazard barrier, then
//! `vkCmdCopyBuffer` / `vkCmdFillBuffer` (both allowed on transfer-only queues since Vulkan 1.1).

use ash::vk;
use tensormem_contract::{BlockRange, Result, Ticket};

use super::{State, VulkanBackend};
use crate::barriers::Access;
use crate::conv::Stage;
use crate::device::Gpu;
use crate::timeline::{Lane, Timeline};

impl VulkanBackend {
    /// Records a copy of `src` to `dst` on `lane` (the compute lane's when the transfer lane is
    /// collapsed) and returns the lane's ticket of it.
    pub(crate) fn record_copy(
        &self,
        lane: Lane,
        src: BlockRange,
        dst: BlockRange,
    ) -> Result<Ticket> {
        debug_assert!(
            src.size == dst.size
                && (src.block != dst.block
                    || src.offset + src.size <= dst.offset
                    || dst.offset + dst.size <= src.offset),
            "vulkan: copy {src:?} -> {dst:?} (the front refuses a size mismatch or an overlap)"
        );
        debug_assert!(self.copy_aligned(&src) && self.copy_aligned(&dst));
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        Self::check_range(s, &src, "copy source")?;
        Self::check_range(s, &dst, "copy destination")?;
        let buffer = |r: &BlockRange| s.blocks.get(r.block).map(|b| b.buffer).unwrap_or_default();
        let (src_buf, dst_buf) = (buffer(&src), buffer(&dst));
        let accesses = [transfer(&src, false), transfer(&dst, true)];
        let (timeline, gpu, cmd) = self.after_hazards(s, lane, &accesses)?;
        let region = vk::BufferCopy {
            src_offset: src.offset,
            dst_offset: dst.offset,
            size: src.size,
        };
        // SAFETY: `cmd` is recording; both buffers are live with TRANSFER usage; the regions are
        // in bounds and do not overlap (checked above).
        unsafe { gpu.device.cmd_copy_buffer(cmd, src_buf, dst_buf, &[region]) };
        timeline.note_command();
        Ok(timeline.open_ticket())
    }

    /// Records filling `range` with zero bytes on `lane` and returns the lane's ticket of it.
    pub(crate) fn record_fill(&self, lane: Lane, range: BlockRange) -> Result<Ticket> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        Self::check_range(s, &range, "fill")?;
        debug_assert!(
            self.copy_aligned(&range),
            "vulkan: fill {range:?} off copy_align"
        );
        let buffer = s
            .blocks
            .get(range.block)
            .map(|b| b.buffer)
            .unwrap_or_default();
        let (timeline, gpu, cmd) = self.after_hazards(s, lane, &[transfer(&range, true)])?;
        // SAFETY: `cmd` is recording; offset and size are multiples of 4 inside the buffer.
        unsafe {
            gpu.device
                .cmd_fill_buffer(cmd, buffer, range.offset, range.size, 0)
        };
        timeline.note_command();
        Ok(timeline.open_ticket())
    }

    /// The command buffer of `lane`'s open batch, with the barrier that orders `accesses` after
    /// the earlier commands they conflict with already recorded; with the lane's timeline and the
    /// device, for recording the command itself.
    fn after_hazards<'s>(
        &self,
        s: &'s mut State,
        lane: Lane,
        accesses: &[Access],
    ) -> Result<(&'s mut Timeline, &'s Gpu, vk::CommandBuffer)> {
        let skip_barriers = self.config.skip_barriers_for_testing;
        let (timeline, gpu, allocator) = s.lane(lane);
        let cmd = timeline.batch(gpu, allocator)?.cmd();
        if let Some(b) = timeline.tracker.before(accesses)
            && !skip_barriers
        {
            timeline.record_barrier(&gpu.device, cmd, b);
        }
        Ok((timeline, gpu, cmd))
    }
}

/// A transfer-stage access of `range`, writing when `write`.
fn transfer(range: &BlockRange, write: bool) -> Access {
    Access {
        block: range.block.0,
        offset: range.offset,
        size: range.size,
        stage: Stage::Transfer,
        write,
    }
}
