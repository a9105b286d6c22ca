//! The compute lane's stall, measured on the device: how long the compute queue sat waiting for
//! the transfer lane ([`tensormem_contract::TransferLanes::transfer_stall`]).
//!
//! Every compute batch writes a timestamp when its work is done (its end), and a batch that
//! waits for the transfer lane (a join, `compute_after`) writes one first thing (its start,
//! taken once the semaphore wait let it run). A wait's stall is its start minus the end of the
//! compute batch before it: the time the queue had finished its own work and was held by the
//! transfer lane. Both timestamps are written on the compute queue, the only case in which the
//! spec makes two timestamps comparable. Batches are read back when the lane's semaphore
//! passes their ticket, in ticket order (`Timeline::recycle`), so the hot path never waits on
//! the host for a query.
//!
//! The measurement is an upper bound of the device-side wait where the host submits the waiting
//! batch late: the gap then also holds the time before its submission (the executor submits the
//! join right after recording the kernel that follows it, so this is a recording's time).
//! Where the compute family writes no timestamps (`timestampValidBits` 0) nothing is measured
//! and the backend reports `None`.

use std::time::Duration;

use ash::vk;
use tensormem_contract::Result;

use crate::device::Timestamps;
use crate::error::vk_err;

/// The query of a batch's start (written only by a batch that waits for the other lane).
const START: u32 = 0;
/// The query of a batch's end (written by every submitted batch).
const END: u32 = 1;

/// One batch's two timestamp queries.
pub(crate) struct BatchStamps {
    pool: vk::QueryPool,
    /// Whether the start was written (the batch waits for the other lane).
    started: bool,
}

impl BatchStamps {
    /// A query pool of two timestamps.
    pub(super) fn new(device: &ash::Device) -> Result<BatchStamps> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(2);
        // SAFETY: valid create info on a live device.
        let pool = unsafe { device.create_query_pool(&info, None) }
            .map_err(vk_err("vkCreateQueryPool"))?;
        Ok(BatchStamps {
            pool,
            started: false,
        })
    }

    /// Resets both queries at the beginning of the batch's command buffer `cmd`.
    pub(super) fn reset(&mut self, device: &ash::Device, cmd: vk::CommandBuffer) {
        self.started = false;
        // SAFETY: `cmd` is recording, outside a render pass; the queries are not in use (the
        // batch's previous submission completed before its resources were recycled).
        unsafe { device.cmd_reset_query_pool(cmd, self.pool, 0, 2) };
    }

    /// Writes the start, once, before anything else the batch records (its cross-lane wait
    /// holds it until the other lane reached the awaited value).
    pub(super) fn start(&mut self, device: &ash::Device, cmd: vk::CommandBuffer) {
        if self.started {
            return;
        }
        self.started = true;
        // SAFETY: `cmd` is recording; the query was reset earlier in it.
        unsafe {
            device.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.pool,
                START,
            )
        };
    }

    /// Writes the end after everything the batch recorded.
    pub(super) fn end(&self, device: &ash::Device, cmd: vk::CommandBuffer) {
        // SAFETY: as `start`.
        unsafe {
            device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.pool, END)
        };
    }

    /// The start (if written) and end ticks of a completed batch; `None` for a query the
    /// driver does not have (then that wait is not counted).
    fn read(&self, device: &ash::Device) -> (Option<u64>, Option<u64>) {
        let query = |index: u32| {
            let mut tick = [0u64; 1];
            // SAFETY: the pool is live and its batch completed; one 64-bit result.
            unsafe {
                device.get_query_pool_results(
                    self.pool,
                    index,
                    &mut tick,
                    vk::QueryResultFlags::TYPE_64,
                )
            }
            .ok()
            .map(|()| tick[0])
        };
        let start = if self.started { query(START) } else { None };
        (start, query(END))
    }

    /// Destroys the query pool.
    ///
    /// # Safety
    /// No submitted batch uses it.
    pub(super) unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: the caller guarantees the pool is idle.
        unsafe { device.destroy_query_pool(self.pool, None) };
    }
}

/// The stall accumulated over completed compute batches.
#[derive(Debug)]
pub(crate) struct StallClock {
    stamps: Timestamps,
    /// The end tick of the last completed compute batch.
    last_end: Option<u64>,
    stalled_ns: u64,
}

impl StallClock {
    /// Nothing waited yet.
    pub(crate) fn new(stamps: Timestamps) -> StallClock {
        StallClock {
            stamps,
            last_end: None,
            stalled_ns: 0,
        }
    }

    /// A compute batch completed (called in ticket order): reads its timestamps and adds its
    /// wait, if it waited.
    pub(super) fn complete(&mut self, device: &ash::Device, batch: &BatchStamps) {
        let (start, end) = batch.read(device);
        self.add_stall(start, end);
    }

    /// [`StallClock::complete`] on the ticks read.
    fn add_stall(&mut self, start: Option<u64>, end: Option<u64>) {
        if let (Some(start), Some(before)) = (start, self.last_end) {
            self.stalled_ns = self
                .stalled_ns
                .saturating_add(self.stamps.between(before, start));
        }
        self.last_end = end;
    }

    /// The total so far.
    pub(crate) fn stalled(&self) -> Duration {
        Duration::from_nanos(self.stalled_ns)
    }
}

#[cfg(test)]
mod tests;
