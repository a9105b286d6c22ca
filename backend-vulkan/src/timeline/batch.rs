//! The open batch: beginning one, recording parameters and barriers into it, and submitting it
//! with the lane's pending cross-lane and sparse-bind waits.

use ash::vk;
use gpu_allocator::vulkan::Allocator;
use tensormem_contract::{Error, Result, Ticket};

use super::resources::BatchResources;
use super::{Lane, PARAMS_SIZE, SETS_PER_BATCH, Timeline};
use crate::barriers::{GlobalBarrier, for_transfer_queue, host_barrier};
use crate::device::Gpu;
use crate::error::vk_err;

/// The batch being recorded.
pub(crate) struct OpenBatch {
    pub(super) res: BatchResources,
    /// Descriptor sets (= parameter slots) used.
    pub(super) sets_used: u32,
    /// Commands recorded.
    pub(super) commands: u32,
    /// Whether the batch is submitted even without commands: it carries a cross-lane wait
    /// whose ticket was handed out ([`Timeline::join`]).
    pub(super) join: bool,
}

impl OpenBatch {
    /// The command buffer being recorded.
    pub(crate) fn cmd(&self) -> vk::CommandBuffer {
        self.res.cmd
    }

    /// The batch's descriptor pool.
    pub(crate) fn descriptor_pool(&self) -> vk::DescriptorPool {
        self.res.descriptors
    }

    /// Whether another dispatch fits (a descriptor set and a parameter slot).
    pub(crate) fn has_dispatch_room(&self) -> bool {
        self.sets_used < SETS_PER_BATCH
    }

    /// Writes `params` into the next parameter slot; returns (buffer, offset) of the slot.
    pub(crate) fn push_params(
        &mut self,
        params: &[u32; 16],
        slot_size: u64,
    ) -> Option<(vk::Buffer, u64)> {
        debug_assert!(self.has_dispatch_room());
        let alloc = self.res.params_alloc.as_ref()?;
        let ptr = alloc.mapped_ptr()?.as_ptr().cast::<u8>();
        let offset = u64::from(self.sets_used) * slot_size;
        // SAFETY: the parameter buffer holds SETS_PER_BATCH slots of `slot_size >= 64` bytes and
        // is mapped; the slot is unused by the device (the batch is not submitted yet, and it was
        // recycled only after its previous ticket completed).
        unsafe {
            std::ptr::copy_nonoverlapping(
                params.as_ptr().cast::<u8>(),
                ptr.add(offset as usize),
                PARAMS_SIZE as usize,
            )
        };
        self.sets_used += 1;
        Some((self.res.params, offset))
    }

    /// Counts one recorded command.
    pub(crate) fn note_command(&mut self) {
        self.commands += 1;
    }
}

impl Timeline {
    /// The open batch, beginning one if needed. Records nothing else.
    pub(crate) fn batch(&mut self, gpu: &Gpu, allocator: &mut Allocator) -> Result<&mut OpenBatch> {
        self.check_alive()?;
        if self.open.is_none() {
            self.recycle(gpu)?;
            let mut res = match self.free.pop() {
                Some(res) => res,
                None => self.create_resources(gpu, allocator)?,
            };
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: the command buffer is in the initial state (new, or its pool was reset after
            // its ticket completed).
            if let Err(e) = unsafe { gpu.device.begin_command_buffer(res.cmd, &begin) } {
                self.free.push(res);
                return Err(vk_err("vkBeginCommandBuffer")(e));
            }
            if let Some(stamps) = res.stamps.as_mut() {
                stamps.reset(&gpu.device, res.cmd);
            }
            self.open = Some(OpenBatch {
                res,
                sets_used: 0,
                commands: 0,
                join: false,
            });
        }
        self.open.as_mut().ok_or_else(|| {
            Error::invariant(
                "beginning a batch leaves one open",
                "vulkan: no open batch after beginning one",
            )
        })
    }

    /// Records a pipeline barrier into `cmd` (the open batch's command buffer), restricted to
    /// transfer stages on the transfer lane.
    pub(crate) fn record_barrier(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        b: GlobalBarrier,
    ) {
        let b = if self.lane == Lane::Transfer {
            for_transfer_queue(b)
        } else {
            b
        };
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(b.src_access)
            .dst_access_mask(b.dst_access);
        // SAFETY: `cmd` is recording; a global memory barrier has no other requirements.
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                b.src_stage,
                b.dst_stage,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    /// Ends and submits the open batch, if it has commands or is a join; a pending cross-lane
    /// wait goes with it. Returns the last submitted ticket.
    pub(crate) fn submit(&mut self, gpu: &Gpu) -> Result<Ticket> {
        self.check_alive()?;
        let Some(batch) = self.open.take() else {
            return Ok(self.submitted());
        };
        let device = &gpu.device;
        if batch.commands == 0 && !batch.join {
            // Nothing recorded: end it and keep the resources (and any pending wait) for later.
            // SAFETY: the command buffer is recording.
            let _ = unsafe { device.end_command_buffer(batch.res.cmd) };
            // SAFETY: the command buffer is not pending; resetting its pool returns it to initial.
            unsafe {
                device.reset_command_pool(batch.res.pool, vk::CommandPoolResetFlags::empty())
            }
            .map_err(vk_err("vkResetCommandPool"))?;
            self.free.push(batch.res);
            return Ok(self.submitted());
        }
        if let Some(stamps) = &batch.res.stamps {
            stamps.end(device, batch.res.cmd);
        }
        self.record_barrier(device, batch.res.cmd, host_barrier());
        // SAFETY: the command buffer is recording.
        unsafe { device.end_command_buffer(batch.res.cmd) }
            .map_err(vk_err("vkEndCommandBuffer"))?;
        let ticket = self.submitted + 1;
        // The other lane's value and a sparse bind's, each where there is one.
        let (mut wait_semaphores, mut wait_values, mut waits) =
            ([vk::Semaphore::null(); 2], [0; 2], 0);
        for (semaphore, value) in [(self.peer, self.peer_wait), self.bind_wait] {
            if value > 0 {
                wait_semaphores[waits] = semaphore;
                wait_values[waits] = value;
                waits += 1;
            }
        }
        let wait_stages = [vk::PipelineStageFlags::ALL_COMMANDS; 2];
        let signal_values = [ticket];
        let semaphores = [self.semaphore];
        let cmds = [batch.res.cmd];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .signal_semaphore_values(&signal_values)
            .wait_semaphore_values(&wait_values[..waits]);
        let submit = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .signal_semaphores(&semaphores)
            .wait_semaphores(&wait_semaphores[..waits])
            .wait_dst_stage_mask(&wait_stages[..waits])
            .push_next(&mut timeline_info);
        // SAFETY: the command buffer is executable; the signal value is greater than every value
        // signalled before (tickets increase); the awaited values' signals were submitted before
        // (`peer_wait`'s invariant; a bind is submitted before the lanes wait for it); the queue is only used under the backend's lock (an adopted
        // queue: the application's guarantee in `from_raw`).
        let result = unsafe { device.queue_submit(self.queue.queue, &[submit], vk::Fence::null()) };
        match result {
            Ok(()) => {
                self.submitted = ticket;
                self.peer_wait = 0;
                self.bind_wait.1 = 0;
                self.in_flight.push_back((ticket, batch.res));
                Ok(Ticket(ticket))
            }
            Err(e) => {
                // The batch is lost; its resources are destroyed with the backend (kept idle).
                self.free.push(batch.res);
                Err(self.map_lost("vkQueueSubmit")(e))
            }
        }
    }

    /// Counts one recorded command in the open batch.
    pub(crate) fn note_command(&mut self) {
        if let Some(b) = self.open.as_mut() {
            b.note_command();
        }
    }
}
