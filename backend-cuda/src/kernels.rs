//! The standard op set on CUDA: `kernels.cu` compiled with NVRTC, loaded once per backend, and
//! launched on the backend's stream.
//!
//! Compilation happens when the first backend for a code target is created and is cached for the
//! process (a second backend, or a test creating many, reuses the image). The target comes from
//! `toolchain::choose_target`: a cubin for the device's architecture whenever the loaded NVRTC
//! knows it (no driver JIT, so an NVRTC newer than the driver within the same major still works),
//! PTX only for a device newer than NVRTC. Launch geometry and argument lists come from
//! `launch.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, map_driver_err};
use crate::launch::{Arg, KERNEL_NAMES, KernelCall};
use crate::nvrtc;
use crate::timeline::lock;
use crate::toolchain::{CodeTarget, Toolchain};

/// The CUDA C source of every kernel: `kernels.cu`, then the decoder ops of `kernels/llm.cu`.
pub(crate) const SOURCE: &str = concat!(
    include_str!("kernels.cu"),
    "\n#line 1 \"kernels/llm.cu\"\n",
    include_str!("kernels/llm.cu")
);

/// Compiled images per code target, compiled once per process.
fn image_cache() -> &'static Mutex<HashMap<CodeTarget, Arc<Vec<u8>>>> {
    static CACHE: OnceLock<Mutex<HashMap<CodeTarget, Arc<Vec<u8>>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles [`SOURCE`] for `target` (or returns the cached image).
///
/// Precise division and square root are kept (no `--use_fast_math`) so results stay within the
/// conformance suite's tolerance of the host reference.
///
/// # Errors
/// [`Error::Backend`] with NVRTC's log when compilation fails.
pub(crate) fn compile(target: CodeTarget) -> Result<Arc<Vec<u8>>> {
    let mut cache = lock(image_cache());
    if let Some(image) = cache.get(&target) {
        return Ok(Arc::clone(image));
    }
    let image = Arc::new(nvrtc::compile(SOURCE, "tensormem_kernels.cu", target, &[])?);
    cache.insert(target, Arc::clone(&image));
    Ok(image)
}

/// Maps a failed `cuModuleLoadData`: the codes that mean "this driver cannot take this code" get
/// the versions and the chosen target in the message, so a mismatched pair is named, not opaque.
pub(crate) fn map_load_err(
    err: cudarc::driver::DriverError,
    target: CodeTarget,
    tools: Toolchain,
) -> Error {
    match err.0 {
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | CUresult::CUDA_ERROR_INVALID_PTX
        | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUresult::CUDA_ERROR_INVALID_IMAGE
        | CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND => Error::BackendUnavailable {
            backend: BACKEND,
            reason: format!(
                "cuModuleLoadData refused the kernels ({:?}): {target} from NVRTC {} on a \
                 driver supporting CUDA {}. Use an NVRTC of the driver's CUDA version \
                 (LD_LIBRARY_PATH) or update the driver",
                err.0, tools.nvrtc, tools.driver
            ),
        },
        _ => map_driver_err("cuModuleLoadData", err),
    }
}

/// The loaded kernels of one backend.
#[derive(Debug)]
pub(crate) struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
}

impl Kernels {
    /// Compiles (or reuses) the kernels for `target`, loads them into `ctx` and looks up every
    /// kernel of [`KERNEL_NAMES`].
    ///
    /// # Errors
    /// As [`compile`]; [`map_load_err`] for `cuModuleLoadData`; a mapped driver error
    /// (`cuModuleGetFunction`).
    pub(crate) fn load(
        ctx: &Arc<CudaContext>,
        target: CodeTarget,
        tools: Toolchain,
    ) -> Result<Self> {
        let image = compile(target)?;
        let module = ctx
            .load_module(Ptx::from_binary(image.as_ref().clone()))
            .map_err(|e| map_load_err(e, target, tools))?;
        let mut functions = HashMap::new();
        for name in KERNEL_NAMES {
            let f = module
                .load_function(name)
                .map_err(|e| map_driver_err("cuModuleGetFunction", e))?;
            functions.insert(name, f);
        }
        Ok(Kernels { functions })
    }

    /// Enqueues `call` on `stream`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a kernel that was not loaded; a mapped driver error
    /// (`cuLaunchKernel`).
    pub(crate) fn launch(&self, stream: &CudaStream, call: &KernelCall) -> Result<()> {
        let f = self
            .functions
            .get(call.kernel)
            .ok_or_else(|| Error::Unsupported {
                backend: BACKEND,
                what: format!("kernel {}", call.kernel),
            })?;
        let mut builder = stream.launch_builder(f);
        for arg in &call.args {
            match arg {
                Arg::Ptr(v) | Arg::U64(v) => builder.arg(v),
                Arg::U32(v) => builder.arg(v),
                Arg::F32(v) => builder.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: call.dims.grid,
            block_dim: call.dims.block,
            shared_mem_bytes: call.dims.shared_bytes,
        };
        // SAFETY: the argument list matches the kernel's parameter list (tested against the
        // source in launch/tests.rs); every pointer is the address of a live block range the
        // caller checked against the op's operand sizes; `args` outlives the launch call, which
        // copies the argument values.
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(|e| map_driver_err("cuLaunchKernel", e))
    }
}

#[cfg(test)]
mod tests;
