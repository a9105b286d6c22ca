//! Physical device choice, queues and the logical device, created here or adopted from the
//! application, plus the limits read once into [`Gpu`].
//!
//! Choice: the first device (by type: discrete, integrated, virtual, CPU) that reports Vulkan 1.2+,
//! the `timelineSemaphore` feature and a compute queue, optionally filtered by name. Queues: one
//! compute queue, and for the transfer lane the first family with `TRANSFER` but neither
//! `GRAPHICS` nor `COMPUTE` (the copy engines of discrete GPUs) when there is one, else a second
//! queue of the compute family when it has two, else the compute queue itself ([`LaneQueue`]).
//! lavapipe has one family with one queue, so there the lane shares the queue.
//!
//! Sparse binding (blocks that grow in place, `crate::sparse`) is enabled where the device offers
//! `sparseBinding` and `sparseResidencyBuffer` and the compute family binds sparse memory
//! (`SPARSE_BINDING`): binds then go on the compute queue, in order with its timeline. An adopted
//! device's enabled features are unknown, so it takes the blocks path.

mod create;
mod properties;
mod timestamps;

use ash::vk;
use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, vk_err};
use crate::instance::OwnedInstance;
use properties::{device_name, supports_timeline};
pub(crate) use timestamps::Timestamps;

/// Where the transfer lane ([`tensormem_contract::backend::lanes`]) runs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TransferQueue {
    /// A concurrent lane on the best queue the device offers: a dedicated transfer family, else
    /// a second queue of the compute family, else the compute queue ([`LaneQueue`]). Default.
    #[default]
    Auto,
    /// A concurrent lane on the compute queue even where the device has other queues: its own
    /// submissions and timeline semaphore, as on a one-queue device. For tests.
    SameQueue,
    /// No lane of its own: transfer work is compute work ([`tensormem_contract::TransferLane::Collapsed`]),
    /// the contract's fallback, kept to measure what the lane gains.
    Off,
}

/// The queue a concurrent transfer lane submits to. Submissions to one queue may execute
/// concurrently unless synchronised, so each choice overlaps copies with kernels as far as the
/// hardware and driver allow; a copy engine (a dedicated family) is what discrete GPUs overlap
/// best.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LaneQueue {
    /// A queue of a transfer-only family (discrete GPUs' copy engines). Buffers are shared
    /// `VK_SHARING_MODE_CONCURRENT` between it and the compute family.
    DedicatedFamily,
    /// A second queue of the compute family.
    SecondQueue,
    /// The compute queue itself, with the lane's own submissions and semaphore.
    SameQueue,
}

/// One queue and its family.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueLane {
    pub family: u32,
    pub queue: vk::Queue,
}

/// The transfer lane's queue, and which kind of queue it is.
pub(crate) type TransferLaneQueue = (QueueLane, LaneQueue);

/// Handles adopted from an application with [`crate::VulkanBackend::from_raw`].
pub struct RawVulkan {
    /// The loader the handles were created with.
    pub entry: ash::Entry,
    /// The application's instance (Vulkan 1.2+).
    pub instance: ash::Instance,
    /// The physical device `device` was created on.
    pub physical_device: vk::PhysicalDevice,
    /// The application's device, created with `VkPhysicalDeviceVulkan12Features::timelineSemaphore`.
    pub device: ash::Device,
    /// Family of `queue`; it must support compute.
    pub queue_family_index: u32,
    /// The queue tensormem submits to.
    pub queue: vk::Queue,
}

/// The device and what was read from it once.
pub(crate) struct Gpu {
    /// The loader. Dropping it unloads `libvulkan`, so it lives as long as every handle.
    _entry: ash::Entry,
    pub instance: ash::Instance,
    owned_instance: Option<OwnedInstance>,
    pub physical: vk::PhysicalDevice,
    pub device: ash::Device,
    owns_device: bool,
    pub compute: QueueLane,
    /// The transfer lane's queue and which kind it is; `None` under [`TransferQueue::Off`].
    pub transfer: Option<TransferLaneQueue>,
    pub limits: vk::PhysicalDeviceLimits,
    pub name: String,
    /// Discrete, integrated, virtual, CPU (lavapipe) or other, as the driver reports it.
    pub device_type: vk::PhysicalDeviceType,
    /// min(maxMemoryAllocationSize, maxBufferSize, largest device-local heap), in bytes.
    pub max_block_size: u64,
    /// Device-local bytes this process may use, from VK_EXT_memory_budget or the heap sizes.
    pub budget: u64,
    /// Where host-visible memory lives (see [`host_placement`]).
    pub host_placement: tensormem_contract::HostPlacement,
    /// How the compute queue's timestamps read; `None` where its family writes none
    /// (`timestampValidBits` 0), so the lane's stall is not measured.
    pub timestamps: Option<Timestamps>,
    /// The sparse binding the device was created with; `None` where it was not enabled.
    pub sparse: Option<SparseLimits>,
}

/// Limits of sparse buffers on a device created with `sparseBinding` and `sparseResidencyBuffer`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct SparseLimits {
    /// `sparseAddressSpaceSize`: the bytes all live sparse resources may span together.
    pub address_space: u64,
    /// The largest buffer: `maxBufferSize` (Vulkan 1.3), else `maxMemoryAllocationSize`.
    pub max_buffer: u64,
}

/// Device type preference, lower is better.
fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

/// The families to use: compute, and a dedicated transfer family if any.
fn pick_families(families: &[vk::QueueFamilyProperties]) -> Option<(u32, Option<u32>)> {
    let compute = families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)?;
    let transfer = families.iter().position(|f| {
        f.queue_flags.contains(vk::QueueFlags::TRANSFER)
            && !f
                .queue_flags
                .intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
            && f.queue_count > 0
    });
    Some((compute as u32, transfer.map(|t| t as u32)))
}

/// Where the transfer lane runs under `mode`, given whether the device has a dedicated transfer
/// family and how many queues its compute family has.
fn lane_queue(
    mode: TransferQueue,
    dedicated_family: bool,
    compute_queues: u32,
) -> Option<LaneQueue> {
    match mode {
        TransferQueue::Off => None,
        TransferQueue::SameQueue => Some(LaneQueue::SameQueue),
        TransferQueue::Auto if dedicated_family => Some(LaneQueue::DedicatedFamily),
        TransferQueue::Auto if compute_queues > 1 => Some(LaneQueue::SecondQueue),
        TransferQueue::Auto => Some(LaneQueue::SameQueue),
    }
}

impl Gpu {
    /// Chooses a physical device on `owned` and creates the logical device and queues.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when no device qualifies (the reason lists what each lacked).
    pub(crate) fn create(
        entry: ash::Entry,
        owned: OwnedInstance,
        name_filter: Option<&str>,
        transfer_mode: TransferQueue,
        want_sparse: bool,
    ) -> Result<Gpu> {
        let mut owned = owned;
        match Self::create_device(&owned.instance, name_filter, transfer_mode, want_sparse) {
            Ok((physical, device, compute, transfer, sparse)) => {
                let instance = owned.instance.clone();
                let mut gpu =
                    Gpu::describe(entry, instance, physical, device, compute, transfer, sparse);
                gpu.owned_instance = Some(owned);
                gpu.owns_device = true;
                Ok(gpu)
            }
            Err(e) => {
                // SAFETY: no device was created from the instance.
                unsafe { owned.destroy() };
                Err(e)
            }
        }
    }

    /// Adopts an application's handles. Nothing adopted is destroyed on drop.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the device lacks Vulkan 1.2 or timeline semaphores, or
    /// the family has no compute.
    pub(crate) fn adopt(raw: RawVulkan, transfer_mode: TransferQueue) -> Result<Gpu> {
        // SAFETY: `physical_device` belongs to `instance` (the caller's guarantee).
        let props = unsafe {
            raw.instance
                .get_physical_device_properties(raw.physical_device)
        };
        // SAFETY: as above.
        let families = unsafe {
            raw.instance
                .get_physical_device_queue_family_properties(raw.physical_device)
        };
        let family_ok = families
            .get(raw.queue_family_index as usize)
            .is_some_and(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE));
        if props.api_version < vk::API_VERSION_1_2
            || !supports_timeline(&raw.instance, raw.physical_device)
            || !family_ok
        {
            return Err(Error::BackendUnavailable {
                backend: BACKEND,
                reason: format!(
                    "adopted device {} needs Vulkan 1.2, timeline semaphores and a compute queue",
                    device_name(&props)
                ),
            });
        }
        let compute = QueueLane {
            family: raw.queue_family_index,
            queue: raw.queue,
        };
        // The application handed over one queue: the lane shares it.
        let transfer = lane_queue(transfer_mode, false, 1).map(|kind| (compute, kind));
        Ok(Gpu::describe(
            raw.entry,
            raw.instance,
            raw.physical_device,
            raw.device,
            compute,
            transfer,
            false,
        ))
    }

    /// The queue families buffers are shared between (for `VK_SHARING_MODE_CONCURRENT`), or
    /// `None` when one family does everything.
    pub(crate) fn sharing_families(&self) -> Option<[u32; 2]> {
        match self.transfer {
            Some((t, _)) if t.family != self.compute.family => {
                Some([self.compute.family, t.family])
            }
            _ => None,
        }
    }

    /// A timeline semaphore at value 0.
    ///
    /// # Errors
    /// `vkCreateSemaphore`'s.
    pub(crate) fn timeline_semaphore(&self) -> Result<vk::Semaphore> {
        let mut type_info = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
        // SAFETY: timeline semaphores are enabled on the device (checked when it was chosen).
        unsafe { self.device.create_semaphore(&info, None) }.map_err(vk_err("vkCreateSemaphore"))
    }

    /// Destroys the device and the instance if this backend created them.
    ///
    /// # Safety
    /// Every object created from the device must be destroyed and the device idle; called once.
    pub(crate) unsafe fn destroy(&mut self) {
        if self.owns_device {
            // SAFETY: the caller guarantees all children are gone and the device is idle.
            unsafe { self.device.destroy_device(None) };
        }
        if let Some(mut owned) = self.owned_instance.take() {
            // SAFETY: the device (the instance's only child besides the messenger) is destroyed.
            unsafe { owned.destroy() };
        }
    }
}

#[cfg(test)]
mod tests;
