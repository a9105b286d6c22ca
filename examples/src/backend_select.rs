//! Choosing a backend at run time, and saying why.
//!
//! `auto` picks what will run fastest: a real GPU (discrete first, then integrated, then virtual
//! or unknown types), else the host backend, whose native multi-core kernels beat any software
//! implementation of a GPU API. Software implementations (lavapipe and llvmpipe, SwiftShader,
//! WARP: Vulkan's and wgpu's CPU device type) are used only when asked for by name: on a machine
//! without a GPU they run the same kernels tens of times slower than `--backend host`.
//!
//! The APIs are probed in the order CUDA, Vulkan, wgpu; a discrete GPU ends the search at once
//! (the remaining APIs are not started), otherwise every API is tried and the best device type
//! wins, the earlier API breaking ties. Each backend passed over is recorded with its reason, for
//! the report and `--json`.

use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use serde_json::{Value, json};
use tensormem::{Backend, DeviceType, HostBackend, HostConfig, Result};

/// The `--backend` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The fastest available: a real GPU (CUDA, Vulkan, wgpu), else the host CPU.
    Auto,
    /// The host backend: native multi-core CPU kernels, always available.
    Host,
    /// Vulkan (also on lavapipe when asked for by name).
    Vulkan,
    /// wgpu (Vulkan, Metal, DX12 or GL underneath).
    Wgpu,
    /// CUDA (an NVIDIA driver and NVRTC are needed).
    Cuda,
}

impl BackendChoice {
    /// The name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Host => "host",
            BackendChoice::Vulkan => "vulkan",
            BackendChoice::Wgpu => "wgpu",
            BackendChoice::Cuda => "cuda",
        }
    }
}

/// GPU APIs `auto` probes, in tie-breaking order.
const AUTO_ORDER: [BackendChoice; 3] = [
    BackendChoice::Cuda,
    BackendChoice::Vulkan,
    BackendChoice::Wgpu,
];

/// Options every backend is created with.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SelectOptions {
    /// Longest one device wait may block before it fails (`--timeout`); `None` waits forever.
    /// Passed to the Vulkan and wgpu backends; CUDA's waits and the host backend's always end
    /// when the work does.
    pub wait_timeout: Option<Duration>,
}

impl Default for SelectOptions {
    fn default() -> Self {
        SelectOptions {
            wait_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// A backend `auto` did not use, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct PassedOver {
    /// Backend name ("vulkan", ...).
    pub backend: &'static str,
    /// The device it found, when it started.
    pub device: Option<String>,
    /// That device's type, when it started.
    pub device_type: Option<DeviceType>,
    /// Why it was not used.
    pub reason: String,
}

/// The backend in use and how it was chosen.
pub struct Selection {
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// What the user asked for.
    pub requested: BackendChoice,
    /// Why it was chosen, in one line.
    pub reason: String,
    /// Backends `auto` tried or skipped (empty for a named backend).
    pub passed_over: Vec<PassedOver>,
}

impl Selection {
    /// The selection as JSON: backend, device, device type, reason and every backend passed over.
    pub fn to_json(&self) -> Value {
        let caps = self.backend.capabilities();
        let passed: Vec<Value> = self
            .passed_over
            .iter()
            .map(|p| {
                json!({
                    "backend": p.backend,
                    "device": p.device,
                    "device_type": p.device_type.map(DeviceType::name),
                    "reason": p.reason,
                })
            })
            .collect();
        json!({
            "requested": self.requested.name(),
            "backend": caps.backend,
            "device": caps.device_name,
            "device_type": caps.device_type.name(),
            "reason": self.reason,
            "passed_over": passed,
        })
    }

    /// The selection as report lines ("backend ..." then one line per backend passed over).
    pub fn to_text(&self) -> String {
        let caps = self.backend.capabilities();
        let mut out = format!(
            "backend {} on {} ({}): {}",
            caps.backend,
            caps.device_name,
            caps.device_type.name(),
            self.reason
        );
        for p in &self.passed_over {
            let device = match (&p.device, p.device_type) {
                (Some(d), Some(t)) => format!(" ({d}, {})", t.name()),
                _ => String::new(),
            };
            out.push_str(&format!(
                "\n  passed over {}{device}: {}",
                p.backend, p.reason
            ));
        }
        out
    }
}

/// Creates the backend `choice`; for [`BackendChoice::Auto`], the fastest one available (see the
/// module doc).
///
/// # Errors
/// The backend's own error (usually [`tensormem::Error::BackendUnavailable`]) when a named
/// backend cannot start; `auto` always ends with the host backend, which fails only when its
/// worker thread cannot be spawned.
pub fn select(choice: BackendChoice, options: &SelectOptions) -> Result<Selection> {
    if choice == BackendChoice::Auto {
        return auto(options);
    }
    Ok(Selection {
        backend: create(choice, options)?,
        requested: choice,
        reason: "asked for by name".into(),
        passed_over: Vec::new(),
    })
}

/// Starts one backend.
fn create(choice: BackendChoice, options: &SelectOptions) -> Result<Arc<dyn Backend>> {
    Ok(match choice {
        BackendChoice::Auto | BackendChoice::Host => {
            Arc::new(HostBackend::new(HostConfig::default())?)
        }
        BackendChoice::Cuda => Arc::new(tensormem_cuda::CudaBackend::new(
            &tensormem_cuda::CudaDesc::default(),
        )?),
        BackendChoice::Vulkan => Arc::new(tensormem_vulkan::VulkanBackend::new(
            tensormem_vulkan::VulkanConfig {
                wait_timeout: options.wait_timeout.unwrap_or(Duration::MAX),
                ..tensormem_vulkan::VulkanConfig::default()
            },
        )?),
        // `from_env`: WGPU_BACKEND picks the API (e.g. `gl` for the GLES path on a machine whose
        // Vulkan adapter would otherwise win), TENSORMEM_WGPU_FORCE_STAGING the staging path.
        BackendChoice::Wgpu => Arc::new(tensormem_wgpu::WgpuBackend::new(
            tensormem_wgpu::WgpuConfig {
                wait_timeout: options.wait_timeout,
                ..tensormem_wgpu::WgpuConfig::from_env()
            },
        )?),
    })
}

fn auto(options: &SelectOptions) -> Result<Selection> {
    let pick = pick_fastest(
        |choice| create(choice, options),
        |b: &Arc<dyn Backend>| {
            let caps = b.capabilities();
            (caps.device_type, caps.device_name.clone())
        },
    );
    let (backend, reason) = match pick.chosen {
        Some((_, backend, reason)) => (backend, reason),
        None => (
            create(BackendChoice::Host, options)?,
            "no GPU backend found a hardware GPU: the host backend's native CPU kernels are the \
             fastest path here"
                .to_string(),
        ),
    };
    Ok(Selection {
        backend,
        requested: BackendChoice::Auto,
        reason,
        passed_over: pick.passed_over,
    })
}

/// Where a started device stands for `auto`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A hardware GPU; lower ranks run faster (0 discrete, 1 integrated, 2 virtual or unknown).
    Use(u8),
    /// A software implementation of a GPU API, or the host CPU through a GPU API: never `auto`.
    Software,
}

/// Device names of software implementations that some drivers report with a GPU type (GL
/// drivers often say "other"); matched case-insensitively.
const SOFTWARE_NAMES: [&str; 5] = [
    "llvmpipe",
    "lavapipe",
    "softpipe",
    "swiftshader",
    "microsoft basic render",
];

/// How `auto` ranks a device of `device_type` named `device_name`.
pub fn verdict(device_type: DeviceType, device_name: &str) -> Verdict {
    let lower = device_name.to_lowercase();
    if SOFTWARE_NAMES.iter().any(|s| lower.contains(s)) {
        return Verdict::Software;
    }
    match device_type {
        DeviceType::DiscreteGpu => Verdict::Use(0),
        DeviceType::IntegratedGpu => Verdict::Use(1),
        DeviceType::SoftwareGpu | DeviceType::HostCpu => Verdict::Software,
        _ => Verdict::Use(2),
    }
}

/// What [`pick_fastest`] decided.
pub struct Pick<T> {
    /// The API, its backend and the reason it was chosen; `None` when no hardware GPU started.
    pub chosen: Option<(BackendChoice, T, String)>,
    /// Every other API, with its reason.
    pub passed_over: Vec<PassedOver>,
}

/// `auto`'s search over `AUTO_ORDER`: `start` creates a backend, `describe` reads its device
/// type and name. Generic so the policy is tested without devices.
pub fn pick_fastest<T>(
    mut start: impl FnMut(BackendChoice) -> Result<T>,
    describe: impl Fn(&T) -> (DeviceType, String),
) -> Pick<T> {
    // (rank, API, backend, device type, device name)
    let mut best: Option<(u8, BackendChoice, T, DeviceType, String)> = None;
    let mut passed_over = Vec::new();
    for (i, &choice) in AUTO_ORDER.iter().enumerate() {
        let backend = match start(choice) {
            Ok(b) => b,
            Err(e) => {
                passed_over.push(PassedOver {
                    backend: choice.name(),
                    device: None,
                    device_type: None,
                    reason: format!("did not start: {e}"),
                });
                continue;
            }
        };
        let (device_type, device) = describe(&backend);
        let skip = |reason: String| PassedOver {
            backend: choice.name(),
            device: Some(device.clone()),
            device_type: Some(device_type),
            reason,
        };
        match verdict(device_type, &device) {
            Verdict::Software => passed_over.push(skip(format!(
                "a software implementation on the CPU, slower than the host backend's native \
                 kernels (use it with --backend {})",
                choice.name()
            ))),
            Verdict::Use(rank) => match &best {
                Some((best_rank, best_choice, ..)) if *best_rank <= rank => {
                    passed_over.push(skip(format!(
                        "{} already found a device at least as fast",
                        best_choice.name()
                    )));
                }
                _ => {
                    if let Some((_, old, _, old_type, old_device)) = best.take() {
                        passed_over.push(PassedOver {
                            backend: old.name(),
                            device: Some(old_device),
                            device_type: Some(old_type),
                            reason: format!("{} found a faster device type", choice.name()),
                        });
                    }
                    best = Some((rank, choice, backend, device_type, device));
                    if rank == 0 {
                        for later in &AUTO_ORDER[i + 1..] {
                            passed_over.push(PassedOver {
                                backend: later.name(),
                                device: None,
                                device_type: None,
                                reason: format!(
                                    "not tried: {} already found a discrete GPU",
                                    choice.name()
                                ),
                            });
                        }
                        break;
                    }
                }
            },
        }
    }
    let chosen = best.map(|(rank, choice, backend, device_type, _)| {
        let why = match rank {
            0 => "the fastest kind of device (discrete GPU)".to_string(),
            _ => format!(
                "the fastest device found ({}); no discrete GPU",
                device_type.name()
            ),
        };
        (choice, backend, why)
    });
    Pick {
        chosen,
        passed_over,
    }
}

#[cfg(test)]
mod tests;
