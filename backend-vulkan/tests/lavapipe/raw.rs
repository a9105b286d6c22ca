//! Adopting an application's instance, device and queue with `from_raw`.

use tensormem::{Backend, MemoryKind};
use tensormem_vulkan::ash::{self, vk};
use tensormem_vulkan::{RawVulkan, VulkanBackend, VulkanConfig};

use crate::{alloc, download, range, upload};

#[test]
fn from_raw_adopts_and_leaves_app_handles_alive() {
    // SAFETY: loading the system loader.
    let Ok(entry) = (unsafe { ash::Entry::load() }) else {
        eprintln!("SKIPPED: no Vulkan loader");
        return;
    };
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: valid create info.
    let Ok(instance) = (unsafe { entry.create_instance(&info, None) }) else {
        eprintln!("SKIPPED: no Vulkan driver");
        return;
    };
    // SAFETY: live instance.
    let pd = unsafe { instance.enumerate_physical_devices() }.unwrap()[0];
    // SAFETY: `pd` belongs to `instance`.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let family = families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .unwrap() as u32;
    let priority = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priority)];
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let dinfo = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .push_next(&mut f12);
    // SAFETY: valid create info for this physical device.
    let device = unsafe { instance.create_device(pd, &dinfo, None) }.unwrap();
    // SAFETY: queue 0 of `family` was requested.
    let queue = unsafe { device.get_device_queue(family, 0) };
    let raw = RawVulkan {
        entry: entry.clone(),
        instance: instance.clone(),
        physical_device: pd,
        device: device.clone(),
        queue_family_index: family,
        queue,
    };
    for force_staging in [false, true] {
        // SAFETY: the device has timeline semaphores, the queue is only used by the backend here,
        // and both outlive it (destroyed below).
        let b = unsafe {
            VulkanBackend::from_raw(
                RawVulkan {
                    entry: raw.entry.clone(),
                    instance: raw.instance.clone(),
                    device: raw.device.clone(),
                    ..raw
                },
                VulkanConfig {
                    force_staging,
                    ..VulkanConfig::default()
                },
            )
        }
        .unwrap();
        let d = alloc(&b, MemoryKind::DeviceLocal, 4096);
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        upload(&b, d, 0, &data);
        b.fill_zero(range(d, 0, 64)).unwrap();
        let out = download(&b, d, 0, 4096);
        assert_eq!(&out[64..], &data[64..]);
        assert!(out[..64].iter().all(|&x| x == 0));
        drop(b); // leaves `d` to the backend's drop: freed with everything else
    }
    // The application's handles are still valid: it destroys them itself.
    // SAFETY: idle device, destroyed once, then its instance.
    unsafe {
        device.device_wait_idle().unwrap();
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
}
