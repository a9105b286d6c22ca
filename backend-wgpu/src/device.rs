//! Creating or adopting the wgpu device, and reading its [`Capabilities`].
//!
//! `create_async` walks instance → adapter → device and turns every failure into
//! [`Error::BackendUnavailable`] with a reason a user can act on. `capabilities` derives the
//! contract's numbers from the device's limits, features and adapter type.

use tensormem_contract::{Capabilities, Error, Result};

use crate::config::WgpuConfig;
use crate::conv::is_unified_memory;
use crate::error::BACKEND;

/// Creates an instance, picks an adapter and opens a device with the adapter's full limits (in
/// a browser: the WebGPU adapter's limits, e.g. Chromium's 128 MiB storage binding and 256 MiB
/// buffer, which `capabilities` then reports).
///
/// # Errors
/// [`Error::BackendUnavailable`] when no adapter is found or the device cannot be opened.
pub(crate) async fn create_async(config: &WgpuConfig) -> Result<(wgpu::Device, wgpu::Queue)> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = config.backends;
    let instance = wgpu::Instance::new(desc);
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: config.power_preference,
            force_fallback_adapter: false,
            compatible_surface: None,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::BackendUnavailable {
            backend: BACKEND,
            reason: format!(
                "no adapter for backends {:?}: {e} (on a machine without a GPU, install \
             `libvulkan1 mesa-vulkan-drivers` for lavapipe)",
                config.backends
            ),
        })?;
    let info = adapter.get_info();
    let mut required_features = wgpu::Features::empty();
    if wants_zero_copy(config, &adapter.features(), info.device_type) {
        required_features |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
    }
    let device_desc = wgpu::DeviceDescriptor {
        label: Some("tensormem"),
        required_features,
        required_limits: adapter.limits(),
        ..Default::default()
    };
    adapter
        .request_device(&device_desc)
        .await
        .map_err(|e| Error::BackendUnavailable {
            backend: BACKEND,
            reason: format!(
                "adapter {} ({:?}) refused a device: {e}",
                info.name, info.backend
            ),
        })
}

/// Whether device-local blocks should be mappable: a unified-memory adapter that supports
/// mappable storage buffers, and staging not forced.
pub(crate) fn wants_zero_copy(
    config: &WgpuConfig,
    features: &wgpu::Features,
    device_type: wgpu::DeviceType,
) -> bool {
    !config.force_staging
        && features.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        && is_unified_memory(device_type)
}

/// The contract's capabilities of `device` under `config`.
///
/// * `binding_align`: `min_storage_buffer_offset_alignment` (32 on lavapipe: wgpu raises
///   Vulkan's 16).
/// * `copy_align`: 4 (`COPY_BUFFER_ALIGNMENT`, which also bounds `clear_buffer` and
///   `write_buffer`). Mapped ranges need 8-aligned starts (`MAP_ALIGNMENT`), which the backend
///   handles itself by widening the mapped view, so the contract's single alignment stays 4.
/// * `max_block_size` / `max_binding_size`: `max_buffer_size` /
///   `max_storage_buffer_binding_size`.
/// * `budget`: [`WgpuConfig::budget`] when set, else the system's memory
///   ([`system_memory`](crate::system_memory)): wgpu exposes no heap size or budget query, and
///   on CPU and integrated adapters (every adapter whose memory the host can size) device memory
///   is system memory; on a discrete adapter it bounds a runaway request (a 1 TiB tensor) until
///   the configured value says the real size.
pub(crate) fn capabilities(device: &wgpu::Device, config: &WgpuConfig) -> Capabilities {
    let limits = device.limits();
    let info = device.adapter_info();
    let zero_copy = !config.force_staging
        && device
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        && is_unified_memory(info.device_type);
    Capabilities {
        backend: BACKEND,
        device_name: format!("{} ({:?})", info.name, info.backend),
        device_type: crate::conv::map_device_type(info.device_type),
        binding_align: u64::from(limits.min_storage_buffer_offset_alignment),
        copy_align: wgpu::COPY_BUFFER_ALIGNMENT,
        max_block_size: limits.max_buffer_size,
        max_binding_size: limits.max_storage_buffer_binding_size,
        device_host_visible: zero_copy,
        queued_write_max: config.queued_write_max,
        budget: config
            .budget
            .or_else(crate::system_memory)
            .filter(|&b| b > 0),
        // A `MAP_READ` buffer may not be a copy source without mappable-primary-buffers, so
        // copies keep the staging directions.
        host_visible_copies: false,
        host_placement: host_placement(),
    }
}

/// wgpu allocates every buffer through the driver (or the browser), which places the pages:
/// nothing can be bound, and wgpu does not say which PCI device an adapter is.
fn host_placement() -> tensormem_contract::HostPlacement {
    #[cfg(target_arch = "wasm32")]
    return tensormem_contract::HostPlacement::unbound("the browser owns the memory");
    #[cfg(not(target_arch = "wasm32"))]
    match tensormem_host::numa::NumaTopology::system() {
        Ok(t) if t.nodes().len() >= 2 => {
            tensormem_contract::HostPlacement::DriverPlaced { device_node: None }
        }
        Ok(_) => tensormem_contract::HostPlacement::unbound("one NUMA node"),
        Err(e) => tensormem_contract::HostPlacement::unbound(e.to_string()),
    }
}

/// Bytes of memory the system has (`MemTotal` of `/proc/meminfo` on Linux), or `None` where it
/// cannot tell (other systems, a browser).
pub fn system_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
