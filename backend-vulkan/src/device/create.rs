//! Creating the logical device: the physical device chosen among those that qualify, its queues
//! for the compute and transfer lanes, and the extensions and sparse features enabled.

use ash::vk;
use tensormem_contract::{Error, Result};

use super::properties::{
    device_name, families_of, has_extension, offers_sparse, supports_timeline,
};
use super::{
    Gpu, LaneQueue, QueueLane, TransferLaneQueue, TransferQueue, lane_queue, pick_families,
    type_rank,
};
use crate::error::{BACKEND, vk_err};

impl Gpu {
    /// The chosen device, its queues, and whether sparse binding was enabled on it.
    pub(super) fn create_device(
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
}
