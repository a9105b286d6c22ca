//! The standard op set on CUDA: `kernels.cu` compiled with NVRTC, loaded once per backend, and
//! launched on the backend's stream.
//!
//! Compilation happens when the first backend for a device architecture is created and is cached
//! for the process (a second backend, or a test creating many, reuses the PTX). The PTX targets the
//! virtual architecture of the device (`conv::nvrtc_arch`), so the driver JIT-compiles it for the
//! exact GPU at module load. Launch geometry and argument lists come from `launch.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};
use tensormem::{Error, Result};

use crate::error::{BACKEND, map_driver_err};
use crate::launch::{Arg, KERNEL_NAMES, KernelCall};
use crate::timeline::lock;

/// The CUDA C source of every kernel.
pub(crate) const SOURCE: &str = include_str!("kernels.cu");

/// PTX per NVRTC architecture, compiled once per process.
fn ptx_cache() -> &'static Mutex<HashMap<&'static str, Ptx>> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Ptx>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles [`SOURCE`] for `arch` (or returns the cached PTX).
///
/// Precise division and square root are kept (no `--use_fast_math`) so results stay within the
/// conformance suite's tolerance of the host reference.
///
/// # Errors
/// [`Error::Backend`] with NVRTC's log when compilation fails.
pub(crate) fn compile(arch: &'static str) -> Result<Ptx> {
    let mut cache = lock(ptx_cache());
    if let Some(ptx) = cache.get(arch) {
        return Ok(ptx.clone());
    }
    let opts = CompileOptions {
        arch: Some(arch),
        name: Some("tensormem_kernels.cu".into()),
        ..CompileOptions::default()
    };
    let ptx = compile_ptx_with_opts(SOURCE, opts).map_err(map_compile_err)?;
    cache.insert(arch, ptx.clone());
    Ok(ptx)
}

fn map_compile_err(err: CompileError) -> Error {
    let (api, message) = match err {
        CompileError::CompileError { nvrtc, log, .. } => (
            "nvrtcCompileProgram",
            format!("{nvrtc:?}: {}", log.to_string_lossy()),
        ),
        other => ("nvrtc", format!("{other:?}")),
    };
    Error::Backend {
        backend: BACKEND,
        api,
        code: 0,
        message,
    }
}

/// The loaded kernels of one backend.
#[derive(Debug)]
pub(crate) struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
}

impl Kernels {
    /// Loads `ptx` into `ctx` and looks up every kernel of [`KERNEL_NAMES`].
    ///
    /// # Errors
    /// A mapped driver error (`cuModuleLoadData`, `cuModuleGetFunction`).
    pub(crate) fn load(ctx: &Arc<CudaContext>, ptx: Ptx) -> Result<Self> {
        let module = ctx
            .load_module(ptx)
            .map_err(|e| map_driver_err("cuModuleLoadData", e))?;
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
