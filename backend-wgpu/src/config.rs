//! [`WgpuConfig`]: the knobs of the wgpu backend, each with its default and consequence.

use std::time::Duration;

/// Environment variable that forces the staging path when set to `1` (read by
/// [`WgpuConfig::from_env`]).
pub const FORCE_STAGING_ENV: &str = "TENSORMEM_WGPU_FORCE_STAGING";

/// Largest upload, in bytes, that the pools send through `queue.write_buffer` instead of their
/// mapped staging belt, unless configured otherwise: 4 MiB.
///
/// `queue.write_buffer` beats the belt on small uploads and loses on large ones (its hidden
/// staging copy); the threshold sits between its last clear win and the tie in the `transfer`
/// benchmark (`docs/performance.md`, "wgpu transfers"), and also bounds the hidden staging
/// memory wgpu allocates per queued write.
pub const DEFAULT_QUEUED_WRITE_MAX: u64 = 4 << 20;

/// How the backend creates or adopts its device.
#[derive(Clone, Debug)]
pub struct WgpuConfig {
    /// Take the discrete-GPU path even on a unified-memory device: device-local blocks are not
    /// mappable and every transfer goes through `Upload`/`Readback` blocks and device copies.
    /// Default `false`. On lavapipe, `true` is how CI tests the code path a discrete GPU takes.
    pub force_staging: bool,
    /// APIs to look for an adapter on (`WgpuBackend::new` only). Default: Vulkan, Metal, DX12
    /// and GL natively, the browser's WebGPU on `wasm32`; `wgpu::Backends::from_env()` (`WGPU_BACKEND`) overrides it in
    /// [`WgpuConfig::from_env`].
    pub backends: wgpu::Backends,
    /// Adapter preference (`WgpuBackend::new` only). Default `HighPerformance`.
    pub power_preference: wgpu::PowerPreference,
    /// Reported as `Capabilities::queued_write_max`: uploads up to this many bytes go through
    /// `queue.write_buffer`. Default [`DEFAULT_QUEUED_WRITE_MAX`]; 0 disables the queued path.
    pub queued_write_max: u64,
    /// Longest a `wait` that names no limit, or a buffer mapping, blocks before it fails with
    /// `Error::Timeout`. Default 60 s; `None` waits forever.
    pub wait_timeout: Option<Duration>,
    /// Reported as `Capabilities::budget`: the device bytes the runtime may use, so a tensor
    /// larger than the device is refused with `Error::TooLarge` before anything is allocated.
    /// Default `None`: wgpu has no heap size or budget query, so the backend reports the
    /// system's memory ([`system_memory`](crate::system_memory)), which is the device's memory on
    /// CPU (llvmpipe, lavapipe) and integrated adapters and an upper bound on discrete ones; set
    /// the GPU's real size here on a discrete adapter. `Some(0)` is treated as no budget.
    pub budget: Option<u64>,
}

impl Default for WgpuConfig {
    fn default() -> Self {
        WgpuConfig {
            force_staging: false,
            backends: if cfg!(target_arch = "wasm32") {
                wgpu::Backends::BROWSER_WEBGPU
            } else {
                wgpu::Backends::PRIMARY | wgpu::Backends::GL
            },
            power_preference: wgpu::PowerPreference::HighPerformance,
            queued_write_max: DEFAULT_QUEUED_WRITE_MAX,
            wait_timeout: Some(Duration::from_secs(60)),
            budget: None,
        }
    }
}

impl WgpuConfig {
    /// The defaults, with `force_staging` on when [`FORCE_STAGING_ENV`] is `1` and `backends`
    /// from `WGPU_BACKEND` when set.
    pub fn from_env() -> Self {
        let mut config = WgpuConfig::default();
        if std::env::var(FORCE_STAGING_ENV).is_ok_and(|v| v == "1") {
            config.force_staging = true;
        }
        if let Some(backends) = wgpu::Backends::from_env() {
            config.backends = backends;
        }
        config
    }

    /// The defaults with `force_staging` set as given.
    pub fn staging(force_staging: bool) -> Self {
        WgpuConfig {
            force_staging,
            ..WgpuConfig::default()
        }
    }
}
