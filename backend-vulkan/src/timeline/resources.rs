//! The reusable objects of one batch (command pool and buffer, descriptor pool, parameter
//! buffer, and on a compute lane with timestamps the batch's query pool): created when no
//! recycled set is free, destroyed with the backend.

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme, Allocator};
use tensormem_contract::{Error, Result};

use super::stamps::BatchStamps;
use super::{Lane, MAX_STORAGE_BINDINGS, SETS_PER_BATCH, Timeline};
use crate::device::Gpu;
use crate::error::{BACKEND, map_alloc, map_vk, vk_err};

/// Reusable objects of one batch.
pub(super) struct BatchResources {
    pub pool: vk::CommandPool,
    pub cmd: vk::CommandBuffer,
    pub descriptors: vk::DescriptorPool,
    pub params: vk::Buffer,
    pub params_alloc: Option<Allocation>,
    /// The batch's timestamps, where the lane measures its cross-lane waits.
    pub stamps: Option<BatchStamps>,
}

impl Timeline {
    pub(super) fn create_resources(
        &mut self,
        gpu: &Gpu,
        allocator: &mut Allocator,
    ) -> Result<BatchResources> {
        let device = &gpu.device;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.queue.family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid create info on a live device.
        let pool = unsafe { device.create_command_pool(&info, None) }
            .map_err(vk_err("vkCreateCommandPool"))?;
        let mut res = BatchResources {
            pool,
            cmd: vk::CommandBuffer::null(),
            descriptors: vk::DescriptorPool::null(),
            params: vk::Buffer::null(),
            params_alloc: None,
            stamps: None,
        };
        match self.fill_resources(gpu, allocator, &mut res) {
            Ok(()) => Ok(res),
            Err(e) => {
                // SAFETY: nothing in `res` was used.
                unsafe { destroy_resources(device, allocator, res) };
                Err(e)
            }
        }
    }

    fn fill_resources(
        &self,
        gpu: &Gpu,
        allocator: &mut Allocator,
        res: &mut BatchResources,
    ) -> Result<()> {
        let device = &gpu.device;
        let alloc_info = vk::CommandBufferAllocateInfo::default()
            .command_pool(res.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live.
        let cmds = unsafe { device.allocate_command_buffers(&alloc_info) }
            .map_err(vk_err("vkAllocateCommandBuffers"))?;
        res.cmd = cmds.first().copied().unwrap_or_default();
        if self.stall.is_some() {
            res.stamps = Some(BatchStamps::new(device)?);
        }
        if self.lane == Lane::Transfer {
            // Copies and fills only: no descriptors or parameters.
            return Ok(());
        }
        let sizes = [
            vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: SETS_PER_BATCH * MAX_STORAGE_BINDINGS,
            },
            vk::DescriptorPoolSize {
                ty: vk::DescriptorType::UNIFORM_BUFFER,
                descriptor_count: SETS_PER_BATCH,
            },
        ];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_BATCH)
            .pool_sizes(&sizes);
        // SAFETY: valid create info.
        res.descriptors = unsafe { device.create_descriptor_pool(&info, None) }
            .map_err(vk_err("vkCreateDescriptorPool"))?;
        let size = self.slot_size * u64::from(SETS_PER_BATCH);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::UNIFORM_BUFFER)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info.
        res.params = unsafe { device.create_buffer(&info, None) }
            .map_err(|e| map_vk("vkCreateBuffer", e, size))?;
        // SAFETY: the buffer was just created.
        let requirements = unsafe { device.get_buffer_memory_requirements(res.params) };
        let alloc = allocator
            .allocate(&AllocationCreateDesc {
                name: "tensormem kernel parameters",
                requirements,
                location: MemoryLocation::CpuToGpu,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
            .map_err(|e| map_alloc(e, size, "upload", "kernel parameters"))?;
        // SAFETY: the allocation satisfies the requirements; the buffer is unbound.
        let bound =
            unsafe { device.bind_buffer_memory(res.params, alloc.memory(), alloc.offset()) };
        let coherent = alloc
            .memory_properties()
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        let mapped = alloc.mapped_ptr().is_some();
        res.params_alloc = Some(alloc);
        bound.map_err(vk_err("vkBindBufferMemory"))?;
        if !mapped || !coherent {
            // CpuToGpu is host-visible on every device; coherent on every device seen. A
            // non-coherent one would need a flush per submission, which is not implemented.
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "kernel parameters need host-visible coherent memory".into(),
            });
        }
        Ok(())
    }
}

/// Destroys one batch's objects.
///
/// # Safety
/// None of them is in use by the device.
pub(super) unsafe fn destroy_resources(
    device: &ash::Device,
    allocator: &mut Allocator,
    mut res: BatchResources,
) {
    // SAFETY: the caller guarantees the objects are idle; destroying null handles is a no-op.
    unsafe {
        device.destroy_command_pool(res.pool, None);
        device.destroy_descriptor_pool(res.descriptors, None);
        device.destroy_buffer(res.params, None);
        if let Some(stamps) = &res.stamps {
            stamps.destroy(device);
        }
    }
    if let Some(a) = res.params_alloc.take() {
        let _ = allocator.free(a);
    }
}
