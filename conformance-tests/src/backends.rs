//! The targets the suite runs on. Each backend adds its configurations here: a few lines each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tensormem::{Backend, HostBackend, HostConfig, Result};
use tensormem_vulkan::{ValidationLog, VulkanBackend, VulkanConfig};

use crate::Target;

fn host() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig::default())?))
}

fn host_staging() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    })?))
}

/// The host without blocks that grow in place: the pools' fallback of adding blocks.
fn host_blocks() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig {
        in_place_growth: false,
        ..HostConfig::default()
    })?))
}

fn cuda() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_cuda::CudaBackend::new(
        &tensormem_cuda::CudaDesc::default(),
    )?))
}

fn cuda_stream_ordered() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(tensormem_cuda::CudaBackend::new(
        &tensormem_cuda::CudaDesc {
            device_alloc: tensormem_cuda::DeviceAlloc::StreamOrdered,
            // The arena without holes (the default target has them): both in-place paths run.
            vmm_holes: false,
            ..tensormem_cuda::CudaDesc::default()
        },
    )?))
}

/// The backends' own wait limit (a wait that names none): their 60 s default, or
/// `TENSORMEM_WAIT_TIMEOUT` seconds (0 = forever). A driver that compiles kernels on first use
/// with a cold shader cache can take minutes on one (`scripts/test.sh`, the sparse stage).
///
/// # Errors
/// [`tensormem::ArgumentError::Invalid`] for a value that is not a whole number of seconds.
pub(crate) fn wait_limit(default: Duration) -> Result<Option<Duration>> {
    let Ok(value) = std::env::var("TENSORMEM_WAIT_TIMEOUT") else {
        return Ok(Some(default));
    };
    match value.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(secs) => Ok(Some(Duration::from_secs(secs))),
        Err(_) => Err(tensormem::ArgumentError::invalid_value(
            "TENSORMEM_WAIT_TIMEOUT",
            value,
            "a whole number of seconds (0 waits forever)",
        )
        .into()),
    }
}

/// Validation logs of the Vulkan backends created so far (checked after every case; a log is
/// dropped once its backend is gone and it has been checked one last time).
static VULKAN_LOGS: Mutex<Vec<Arc<ValidationLog>>> = Mutex::new(Vec::new());

/// Vulkan, under the Khronos validation layer with synchronization validation when installed.
/// With `TENSORMEM_REQUIRE_VULKAN_SPARSE=1` (the run on a driver with sparse binding,
/// `scripts/test.sh`) a device without it is unavailable, so the suite cannot silently run
/// the blocks path instead of arenas that grow in place.
fn vulkan_with(force_staging: bool) -> Result<Arc<dyn Backend>> {
    let defaults = VulkanConfig::default();
    let backend = VulkanBackend::new(VulkanConfig {
        force_staging,
        validation: VulkanBackend::validation_available(),
        wait_timeout: wait_limit(defaults.wait_timeout)?.unwrap_or(Duration::MAX),
        ..defaults
    })?;
    if backend.extensions().growable.is_none()
        && std::env::var("TENSORMEM_REQUIRE_VULKAN_SPARSE").is_ok_and(|v| v == "1")
    {
        return Err(tensormem::Error::BackendUnavailable {
            backend: "vulkan",
            reason: format!(
                "TENSORMEM_REQUIRE_VULKAN_SPARSE=1 but {} offers no sparse binding",
                backend.capabilities().device_name
            ),
        });
    }
    if let Some(log) = backend.validation_log() {
        VULKAN_LOGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(log);
    }
    Ok(Arc::new(backend))
}

fn vulkan() -> Result<Arc<dyn Backend>> {
    vulkan_with(false)
}

fn vulkan_staging() -> Result<Arc<dyn Backend>> {
    vulkan_with(true)
}

/// Fails the case on any validation message of any Vulkan backend created so far.
fn vulkan_validation(_: &Arc<dyn Backend>) -> std::result::Result<(), String> {
    let mut logs = VULKAN_LOGS.lock().unwrap_or_else(|e| e.into_inner());
    let messages: Vec<String> = logs.iter().flat_map(|l| l.messages()).collect();
    // Keep only logs whose backend is alive (the backend holds the other reference), and drop
    // every log that has reported, so one failure is not repeated by every later case.
    logs.retain(|l| Arc::strong_count(l) > 1 && l.messages().is_empty());
    if messages.is_empty() {
        Ok(())
    } else {
        Err(format!("Vulkan validation: {}", messages.join("\n")))
    }
}

fn wgpu_with(force_staging: bool) -> Result<Arc<dyn Backend>> {
    let config = tensormem_wgpu::WgpuConfig::staging(force_staging);
    Ok(Arc::new(tensormem_wgpu::WgpuBackend::new(
        tensormem_wgpu::WgpuConfig {
            wait_timeout: match config.wait_timeout {
                Some(default) => wait_limit(default)?,
                None => None,
            },
            ..config
        },
    )?))
}

fn wgpu() -> Result<Arc<dyn Backend>> {
    wgpu_with(false)
}

/// wgpu with staging forced: the discrete-GPU path, even on lavapipe's unified memory.
fn wgpu_staging() -> Result<Arc<dyn Backend>> {
    wgpu_with(true)
}

/// Every target, in report order.
pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "host",
            backend: "host",
            create: host,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "host-staging",
            backend: "host",
            create: host_staging,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "host-blocks",
            backend: "host",
            create: host_blocks,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "cuda",
            backend: "cuda",
            create: cuda,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "cuda-async-alloc",
            backend: "cuda",
            create: cuda_stream_ordered,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "vulkan",
            backend: "vulkan",
            create: vulkan,
            after_case: Some(vulkan_validation),
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "vulkan-staging",
            backend: "vulkan",
            create: vulkan_staging,
            after_case: Some(vulkan_validation),
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "wgpu",
            backend: "wgpu",
            create: wgpu,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        Target {
            name: "wgpu-staging",
            backend: "wgpu",
            create: wgpu_staging,
            after_case: None,
            second: None,
            set_cases_only: false,
        },
        // Two devices of one backend: a mapped device and a staging one, so cross-device copies
        // take both transfer paths at each end.
        Target {
            name: "host-2dev",
            backend: "host",
            create: host,
            after_case: None,
            second: Some(host_staging),
            set_cases_only: false,
        },
        Target {
            name: "cuda-2dev",
            backend: "cuda",
            create: cuda,
            after_case: None,
            second: Some(cuda),
            set_cases_only: false,
        },
        // Two lavapipe devices: two backend instances on the one adapter.
        Target {
            name: "vulkan-2dev",
            backend: "vulkan",
            create: vulkan,
            after_case: Some(vulkan_validation),
            second: Some(vulkan_staging),
            set_cases_only: false,
        },
        Target {
            name: "wgpu-2dev",
            backend: "wgpu",
            create: wgpu,
            after_case: None,
            second: Some(wgpu_staging),
            set_cases_only: false,
        },
        // A mix: the host CPU and a Vulkan device in one set (the device-set cases only).
        Target {
            name: "host+vulkan",
            backend: "vulkan",
            create: host,
            after_case: Some(vulkan_validation),
            second: Some(vulkan),
            set_cases_only: true,
        },
    ]
}
