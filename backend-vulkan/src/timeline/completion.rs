//! Completion on a lane: the semaphore's counter, blocking waits for a ticket, and the recycling
//! of finished batches.

use ash::vk;
use tensormem_contract::{Error, Result};

use super::Timeline;
use crate::device::Gpu;
use crate::error::{BACKEND, vk_err};

impl Timeline {
    /// The semaphore's counter: every ticket up to it has finished.
    pub(crate) fn counter(&mut self, gpu: &Gpu) -> Result<u64> {
        self.check_alive()?;
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let value = unsafe { gpu.device.get_semaphore_counter_value(self.semaphore) };
        value.map_err(self.map_lost("vkGetSemaphoreCounterValue"))
    }

    /// Returns the resources of completed batches to the free list.
    pub(crate) fn recycle(&mut self, gpu: &Gpu) -> Result<u64> {
        let done = self.counter(gpu)?;
        while self.in_flight.front().is_some_and(|(t, _)| *t <= done) {
            let Some((_, res)) = self.in_flight.pop_front() else {
                break;
            };
            if let (Some(clock), Some(stamps)) = (self.stall.as_mut(), &res.stamps) {
                clock.complete(&gpu.device, stamps);
            }
            // SAFETY: the batch's ticket completed, so nothing in the pools is pending.
            unsafe {
                gpu.device
                    .reset_command_pool(res.pool, vk::CommandPoolResetFlags::empty())
                    .map_err(vk_err("vkResetCommandPool"))?;
                if res.descriptors != vk::DescriptorPool::null() {
                    gpu.device
                        .reset_descriptor_pool(
                            res.descriptors,
                            vk::DescriptorPoolResetFlags::empty(),
                        )
                        .map_err(vk_err("vkResetDescriptorPool"))?;
                }
            }
            self.free.push(res);
        }
        Ok(done)
    }

    /// Submits the open batch if `ticket` is beyond the last submitted one. Returns whether
    /// `ticket` has been submitted (`false`: it was never issued).
    pub(crate) fn issue(&mut self, gpu: &Gpu, ticket: u64) -> Result<bool> {
        if ticket > self.submitted {
            self.submit(gpu)?;
        }
        Ok(ticket <= self.submitted)
    }

    /// Blocks until the semaphore reaches `ticket` (already submitted), at most `timeout`;
    /// recycles finished batches.
    pub(crate) fn wait_until(
        &mut self,
        gpu: &Gpu,
        ticket: u64,
        timeout: std::time::Duration,
    ) -> Result<()> {
        if ticket == 0 || self.counter(gpu)? >= ticket {
            self.recycle(gpu)?;
            return Ok(());
        }
        self.wait(gpu, ticket, timeout)
    }

    /// Blocks until the semaphore reaches `ticket` (already submitted), at most `timeout`.
    pub(crate) fn wait(
        &mut self,
        gpu: &Gpu,
        ticket: u64,
        timeout: std::time::Duration,
    ) -> Result<()> {
        self.check_alive()?;
        let semaphores = [self.semaphore];
        let values = [ticket];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: waiting on a live timeline semaphore for a value a submission will signal.
        match unsafe { gpu.device.wait_semaphores(&info, nanos) } {
            Ok(()) => {
                self.recycle(gpu)?;
                Ok(())
            }
            Err(vk::Result::TIMEOUT) => Err(Error::Timeout {
                backend: BACKEND,
                what: format!("ticket {ticket} (vkWaitSemaphores)"),
                timeout,
            }),
            Err(e) => Err(self.map_lost("vkWaitSemaphores")(e)),
        }
    }
}
