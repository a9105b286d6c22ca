//! Which CUDA the build targets, and which code the kernels are compiled to for a given driver,
//! NVRTC and device: the pure half of the NVRTC/driver pairing (`nvrtc.rs` is the FFI half).
//!
//! The rules, as the CUDA compatibility documents state them:
//!
//! * The driver API surface is cudarc's `cuda-13000` feature: a driver older than CUDA 13.0 may
//!   lack a symbol cudarc resolves lazily, which would panic mid-run, so [`check_driver`] refuses
//!   it up front with the versions in the message.
//! * A **cubin** for `sm_XY` runs on devices `X.Z` with `Z >= Y`, and a cubin from NVRTC `M.n`
//!   loads on any driver of the same major `M` (minor-version compatibility). No JIT is involved,
//!   so this is the preferred target whenever NVRTC knows an architecture of the device's major.
//! * **PTX** is JIT-compiled by the driver, which accepts PTX only from an NVRTC no newer than
//!   itself (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION` otherwise). It is the fallback for a device
//!   newer than every architecture NVRTC knows.
//! * NVRTC of a newer major than the driver produces code the driver cannot load either way:
//!   refused with a message naming both versions and the fix.

use std::fmt;

use tensormem_contract::{Error, Result};

use crate::error::BACKEND;

/// A CUDA version, `major.minor` (`cuDriverGetVersion` returns `1000 * major + 10 * minor`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion {
    /// Major version (13 for CUDA 13.0).
    pub major: i32,
    /// Minor version.
    pub minor: i32,
}

impl CudaVersion {
    /// From the integer `cuDriverGetVersion` reports (13000 → 13.0).
    pub fn from_driver_int(v: i32) -> Self {
        CudaVersion {
            major: v / 1000,
            minor: (v % 1000) / 10,
        }
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The CUDA driver API version this build targets: cudarc's `cuda-13000` feature (root
/// `Cargo.toml`). Keep the two in step.
pub const BUILD_CUDA: CudaVersion = CudaVersion {
    major: 13,
    minor: 0,
};

/// What NVRTC compiles the kernels to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CodeTarget {
    /// Machine code for `sm_<arch>` (`--gpu-architecture=sm_XY`); loaded without JIT.
    Cubin {
        /// `10 * major + minor` of the architecture.
        arch: i32,
    },
    /// PTX for `compute_<arch>`, JIT-compiled by the driver at module load.
    Ptx {
        /// `10 * major + minor` of the virtual architecture.
        arch: i32,
    },
}

impl CodeTarget {
    /// NVRTC's `--gpu-architecture=` value.
    pub fn nvrtc_arch(self) -> String {
        match self {
            CodeTarget::Cubin { arch } => format!("sm_{arch}"),
            CodeTarget::Ptx { arch } => format!("compute_{arch}"),
        }
    }
}

impl fmt::Display for CodeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeTarget::Cubin { .. } => write!(f, "cubin {}", self.nvrtc_arch()),
            CodeTarget::Ptx { .. } => write!(f, "PTX {} (driver JIT)", self.nvrtc_arch()),
        }
    }
}

/// The versions one backend runs with, for messages and for [`choose_target`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// What the driver supports (`cuDriverGetVersion`).
    pub driver: CudaVersion,
    /// The NVRTC that was loaded (`nvrtcVersion`).
    pub nvrtc: CudaVersion,
}

impl fmt::Display for Toolchain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "driver CUDA {}, NVRTC {}, build CUDA {}",
            self.driver, self.nvrtc, BUILD_CUDA
        )
    }
}

/// Refuses a driver older than the API the build targets ([`BUILD_CUDA`]).
///
/// # Errors
/// [`Error::BackendUnavailable`] naming both versions and the fix.
pub fn check_driver(driver: CudaVersion) -> Result<()> {
    if driver >= BUILD_CUDA {
        return Ok(());
    }
    Err(Error::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "the NVIDIA driver supports CUDA {driver}, but this build targets the CUDA \
             {BUILD_CUDA} driver API (cudarc feature cuda-{}{:02}0): update the driver (R580 or \
             newer for CUDA 13.0) or rebuild with a cudarc cuda-XXXXX feature no newer than \
             {driver}",
            BUILD_CUDA.major, BUILD_CUDA.minor
        ),
    })
}

/// Refuses an NVRTC older than CUDA 12: it may lack `nvrtcGetSupportedArchs` and cubin output
/// (a missing symbol would panic inside cudarc), and CUDA 13 drivers are the target anyway.
///
/// # Errors
/// [`Error::BackendUnavailable`] naming the version found.
pub fn check_nvrtc(nvrtc: CudaVersion) -> Result<()> {
    if nvrtc.major >= 12 {
        return Ok(());
    }
    Err(Error::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "the NVRTC found first on the loader path is CUDA {nvrtc}; CUDA 12 or newer is \
             needed (for this build: libnvrtc.so.13 first on LD_LIBRARY_PATH)"
        ),
    })
}

/// Chooses the code the kernels are compiled to for a device of compute capability
/// `device` (`(major, minor)`), given the loaded NVRTC's `supported` architectures
/// (`nvrtcGetSupportedArchs`, e.g. `[75, 80, …, 90, 100, 120]`). See the module doc.
///
/// # Errors
/// [`Error::BackendUnavailable`] when NVRTC and the driver cannot work together (NVRTC of a newer
/// major, or PTX from an NVRTC newer than the driver); [`Error::Unsupported`] for a device older
/// than every architecture NVRTC knows.
pub fn choose_target(
    tools: Toolchain,
    supported: &[i32],
    device: (i32, i32),
) -> Result<CodeTarget> {
    if tools.nvrtc.major > tools.driver.major {
        return Err(mismatch(
            tools,
            "code from a newer CUDA major version cannot be loaded by this driver",
        ));
    }
    let dev = 10 * device.0 + device.1;
    // Newest architecture NVRTC knows of the device's major, not above the device: its cubin
    // runs on the device (same major, minor ≤ the device's).
    let same_major = supported
        .iter()
        .copied()
        .filter(|a| a / 10 == device.0 && *a <= dev)
        .max();
    if let Some(arch) = same_major {
        return Ok(CodeTarget::Cubin { arch });
    }
    match supported.iter().copied().filter(|a| *a <= dev).max() {
        // A device newer than NVRTC's table: PTX for the newest older architecture, JIT-compiled
        // by the driver, which needs an NVRTC no newer than the driver.
        Some(arch) if tools.nvrtc <= tools.driver => Ok(CodeTarget::Ptx { arch }),
        Some(_) => Err(mismatch(
            tools,
            "the device is newer than this NVRTC knows, so its kernels need PTX, and the driver \
             JIT-compiles PTX only from an NVRTC no newer than itself",
        )),
        None => Err(Error::Unsupported {
            backend: BACKEND,
            what: format!(
                "compute capability {}.{} with NVRTC {}: it compiles for sm_{} and newer \
                 (use an older NVRTC for this device)",
                device.0,
                device.1,
                tools.nvrtc,
                supported.iter().min().copied().unwrap_or(0)
            ),
        }),
    }
}

fn mismatch(tools: Toolchain, why: &str) -> Error {
    Error::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "NVRTC {} does not match the driver (CUDA {}): {why}. Put an NVRTC of CUDA {}.x \
             no newer than the driver first on LD_LIBRARY_PATH (for CUDA 13: libnvrtc.so.13 \
             from the toolkit or the nvidia-cuda-nvrtc wheel), or update the driver",
            tools.nvrtc, tools.driver, tools.driver.major
        ),
    }
}

#[cfg(test)]
mod tests;
