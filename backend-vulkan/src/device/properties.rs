//! What is read from a physical device: its features, extensions, families and name, and, once
//! for the chosen one, its limits, heaps, budget and NUMA placement.

use std::ffi::CStr;

use ash::vk;

use super::Timestamps;
use super::{Gpu, QueueLane, SparseLimits, TransferLaneQueue};

/// Whether `pd` can bind sparse buffers with unbound ranges on its compute family.
pub(super) fn offers_sparse(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    compute_family: u32,
) -> bool {
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
) -> tensormem_contract::HostPlacement {
    use tensormem_contract::HostPlacement;
    if !cfg!(target_os = "linux") {
        return HostPlacement::unbound("NUMA binding (mbind) is Linux-only");
    }
    let topology = match tensormem_host::numa::NumaTopology::system() {
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

pub(super) fn has_extension(instance: &ash::Instance, pd: vk::PhysicalDevice, name: &CStr) -> bool {
    // SAFETY: `pd` was enumerated from `instance`.
    unsafe { instance.enumerate_device_extension_properties(pd) }
        .unwrap_or_default()
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

pub(super) fn supports_timeline(instance: &ash::Instance, pd: vk::PhysicalDevice) -> bool {
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
    // SAFETY: `pd` belongs to `instance`, which is Vulkan 1.2, so the 1.2 feature struct is valid.
    unsafe { instance.get_physical_device_features2(pd, &mut f) };
    f12.timeline_semaphore == vk::TRUE
}

pub(super) fn device_name(props: &vk::PhysicalDeviceProperties) -> String {
    props
        .device_name_as_c_str()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The queue families of `pd`.
pub(super) fn families_of(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> Vec<vk::QueueFamilyProperties> {
    // SAFETY: `pd` was enumerated from `instance`.
    unsafe { instance.get_physical_device_queue_family_properties(pd) }
}

impl Gpu {
    pub(super) fn describe(
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
}
