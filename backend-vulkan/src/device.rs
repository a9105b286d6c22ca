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

use std::ffi::CStr;

use ash::vk;
use tensormem::{Error, Result};

use crate::error::{BACKEND, vk_err};
use crate::instance::OwnedInstance;
use crate::timeline::Timestamps;

/// Where the transfer lane ([`tensormem::backend::lanes`]) runs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TransferQueue {
    /// A concurrent lane on the best queue the device offers: a dedicated transfer family, else
    /// a second queue of the compute family, else the compute queue ([`LaneQueue`]). Default.
    #[default]
    Auto,
    /// A concurrent lane on the compute queue even where the device has other queues: its own
    /// submissions and timeline semaphore, as on a one-queue device. For tests.
    SameQueue,
    /// No lane of its own: transfer work is compute work ([`tensormem::TransferLane::Collapsed`]),
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
    pub host_placement: tensormem::HostPlacement,
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

/// Whether `pd` can bind sparse buffers with unbound ranges on its compute family.
fn offers_sparse(instance: &ash::Instance, pd: vk::PhysicalDevice, compute_family: u32) -> bool {
    // SAFETY: `pd` was enumerated from `instance`.
    let features = unsafe { instance.get_physical_device_features(pd) };
    features.sparse_binding == vk::TRUE
        && features.sparse_residency_buffer == vk::TRUE
        && families_of(instance, pd)
            .get(compute_family as usize)
            .is_some_and(|f| f.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING))
}

/// Where host-visible memory lives. gpu-allocator has the driver allocate it (`vkAllocateMemory`),
/// and the driver places its pages, so this backend cannot bind them to a NUMA node (that would
/// take importing memory it mapped itself, `VK_EXT_external_memory_host`). On a NUMA machine it
/// reports the device's node from `VK_EXT_pci_bus_info` and sysfs, so the report says where the
/// memory should be; on one node, or off Linux, unbound.
fn host_placement(
    pci: Option<vk::PhysicalDevicePCIBusInfoPropertiesEXT<'_>>,
) -> tensormem::HostPlacement {
    use tensormem::HostPlacement;
    if !cfg!(target_os = "linux") {
        return HostPlacement::unbound("NUMA binding (mbind) is Linux-only");
    }
    let topology = match tensormem::numa::NumaTopology::system() {
        Ok(t) => t,
        Err(e) => return HostPlacement::unbound(e.to_string()),
    };
    if topology.nodes().len() < 2 {
        return HostPlacement::unbound("one NUMA node");
    }
    let device_node = pci.and_then(|p| {
        let bdf = format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            p.pci_domain, p.pci_bus, p.pci_device, p.pci_function
        );
        topology.pci_device_node(&bdf).ok().flatten()
    });
    HostPlacement::DriverPlaced { device_node }
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

fn has_extension(instance: &ash::Instance, pd: vk::PhysicalDevice, name: &CStr) -> bool {
    // SAFETY: `pd` was enumerated from `instance`.
    unsafe { instance.enumerate_device_extension_properties(pd) }
        .unwrap_or_default()
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

fn supports_timeline(instance: &ash::Instance, pd: vk::PhysicalDevice) -> bool {
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
    // SAFETY: `pd` belongs to `instance`, which is Vulkan 1.2, so the 1.2 feature struct is valid.
    unsafe { instance.get_physical_device_features2(pd, &mut f) };
    f12.timeline_semaphore == vk::TRUE
}

fn device_name(props: &vk::PhysicalDeviceProperties) -> String {
    props
        .device_name_as_c_str()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
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

/// The queue families of `pd`.
fn families_of(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Vec<vk::QueueFamilyProperties> {
    // SAFETY: `pd` was enumerated from `instance`.
    unsafe { instance.get_physical_device_queue_family_properties(pd) }
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

    /// The chosen device, its queues, and whether sparse binding was enabled on it.
    fn create_device(
        instance: &ash::Instance,
        name_filter: Option<&str>,
        transfer_mode: TransferQueue,
        want_sparse: bool,
    ) -> Result<(
        vk::PhysicalDevice,
        ash::Device,
        QueueLane,
        Option<TransferLaneQueue>,
        bool,
    )> {
        // SAFETY: enumerating physical devices of a live instance.
        let devices = unsafe { instance.enumerate_physical_devices() }
            .map_err(vk_err("vkEnumeratePhysicalDevices"))?;
        let mut rejected = Vec::new();
        let mut candidates = Vec::new();
        for pd in devices {
            // SAFETY: `pd` was just enumerated from `instance`.
            let props = unsafe { instance.get_physical_device_properties(pd) };
            let name = device_name(&props);
            let families = families_of(instance, pd);
            if name_filter.is_some_and(|f| !name.contains(f)) {
                rejected.push(format!("{name}: name does not contain the filter"));
            } else if props.api_version < vk::API_VERSION_1_2 {
                rejected.push(format!(
                    "{name}: Vulkan {}.{} < 1.2",
                    vk::api_version_major(props.api_version),
                    vk::api_version_minor(props.api_version)
                ));
            } else if !supports_timeline(instance, pd) {
                rejected.push(format!("{name}: no timelineSemaphore"));
            } else if let Some(fams) = pick_families(&families) {
                candidates.push((type_rank(props.device_type), pd, fams));
            } else {
                rejected.push(format!("{name}: no compute queue"));
            }
        }
        candidates.sort_by_key(|c| c.0);
        let Some(&(_, pd, (compute_family, transfer_family))) = candidates.first() else {
            return Err(Error::BackendUnavailable {
                backend: BACKEND,
                reason: if rejected.is_empty() {
                    "no Vulkan physical device found".into()
                } else {
                    format!("no suitable Vulkan device: {}", rejected.join("; "))
                },
            });
        };
        let compute_queues = families_of(instance, pd)
            .get(compute_family as usize)
            .map_or(1, |f| f.queue_count);
        let lane_queue = lane_queue(transfer_mode, transfer_family.is_some(), compute_queues);
        let priorities = [1.0f32, 1.0];
        let compute_count = if lane_queue == Some(LaneQueue::SecondQueue) {
            2
        } else {
            1
        };
        let mut queue_infos = vec![
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(compute_family)
                .queue_priorities(&priorities[..compute_count]),
        ];
        if let (Some(LaneQueue::DedicatedFamily), Some(t)) = (lane_queue, transfer_family) {
            queue_infos.push(
                vk::DeviceQueueCreateInfo::default()
                    .queue_family_index(t)
                    .queue_priorities(&priorities[..1]),
            );
        }
        let mut extensions = Vec::new();
        if has_extension(instance, pd, ash::ext::memory_budget::NAME) {
            extensions.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        let sparse = want_sparse && offers_sparse(instance, pd, compute_family);
        let features = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(sparse)
            .sparse_residency_buffer(sparse);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&extensions)
            .enabled_features(&features)
            .push_next(&mut f12);
        // SAFETY: `pd` qualifies (1.2, timeline semaphores, the families exist, the sparse features
        // are enabled only where offered); `info` is valid.
        let device =
            unsafe { instance.create_device(pd, &info, None) }.map_err(vk_err("vkCreateDevice"))?;
        // SAFETY: queue 0 of each family, and queue 1 of the compute family for a second
        // queue, were requested above.
        let compute = QueueLane {
            family: compute_family,
            queue: unsafe { device.get_device_queue(compute_family, 0) },
        };
        let transfer = match lane_queue {
            Some(kind @ LaneQueue::DedicatedFamily) => transfer_family.map(|family| {
                let queue = QueueLane {
                    family,
                    // SAFETY: as above.
                    queue: unsafe { device.get_device_queue(family, 0) },
                };
                (queue, kind)
            }),
            Some(kind @ LaneQueue::SecondQueue) => {
                let queue = QueueLane {
                    family: compute_family,
                    // SAFETY: as above.
                    queue: unsafe { device.get_device_queue(compute_family, 1) },
                };
                Some((queue, kind))
            }
            Some(kind @ LaneQueue::SameQueue) => Some((compute, kind)),
            None => None,
        };
        Ok((pd, device, compute, transfer, sparse))
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

    fn describe(
        entry: ash::Entry,
        instance: ash::Instance,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        compute: QueueLane,
        transfer: Option<TransferLaneQueue>,
        sparse: bool,
    ) -> Gpu {
        let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut maint4 = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut pci = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
        let has_pci = has_extension(&instance, physical, ash::ext::pci_bus_info::NAME);
        // SAFETY: `physical` belongs to `instance`.
        let api = unsafe { instance.get_physical_device_properties(physical) }.api_version;
        let has_maint4 = api >= vk::API_VERSION_1_3;
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maint3);
        if has_pci {
            props2 = props2.push_next(&mut pci);
        }
        if has_maint4 {
            props2 = props2.push_next(&mut maint4);
        }
        // SAFETY: `physical` belongs to `instance` (1.2, so properties2 and maintenance3 are core);
        // the PCI struct is chained only when the device supports VK_EXT_pci_bus_info, the
        // maintenance4 one only on Vulkan 1.3, where it is core.
        unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
        let props = props2.properties;
        let host_placement = host_placement(has_pci.then_some(pci));
        let max_alloc = maint3.max_memory_allocation_size;
        let mut budget_props = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let has_budget = has_extension(&instance, physical, ash::ext::memory_budget::NAME);
        let mut mem2 = vk::PhysicalDeviceMemoryProperties2::default();
        if has_budget {
            mem2 = mem2.push_next(&mut budget_props);
        }
        // SAFETY: as above; the budget struct is chained only when the extension is supported.
        unsafe { instance.get_physical_device_memory_properties2(physical, &mut mem2) };
        let mem = mem2.memory_properties;
        let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
        let local: Vec<usize> = (0..heaps.len())
            .filter(|&i| heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .collect();
        let largest_heap = local.iter().map(|&i| heaps[i].size).max().unwrap_or(0);
        let budget = if has_budget {
            local.iter().map(|&i| budget_props.heap_budget[i]).sum()
        } else {
            local.iter().map(|&i| heaps[i].size).sum()
        };
        // maxBufferSize (maintenance4, 1.3) bounds only sparse buffers here: a 1.2 device need not
        // have it, and every device seen has it at or above maxMemoryAllocationSize.
        let max_block_size = max_alloc.min(largest_heap.max(1));
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let timestamps = families
            .get(compute.family as usize)
            .and_then(|f| Timestamps::new(f.timestamp_valid_bits, props.limits.timestamp_period));
        Gpu {
            _entry: entry,
            instance,
            owned_instance: None,
            physical,
            device,
            owns_device: false,
            compute,
            transfer,
            limits: props.limits,
            name: device_name(&props),
            device_type: props.device_type,
            max_block_size,
            budget,
            host_placement,
            timestamps,
            sparse: sparse.then_some(SparseLimits {
                address_space: props.limits.sparse_address_space_size,
                max_buffer: if has_maint4 {
                    maint4.max_buffer_size
                } else {
                    max_alloc
                },
            }),
        }
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
