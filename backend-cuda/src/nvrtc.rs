//! NVRTC, called directly (cudarc's `nvrtc::result` and `sys`): its version, the architectures it
//! supports, and compiling the kernels to a cubin or PTX image for a [`CodeTarget`].
//!
//! cudarc's safe `compile_ptx` produces PTX only and unwraps inside (a failed log read or
//! program destroy would panic), so the backend drives the program itself and every failure is a
//! typed error. Which library is loaded is cudarc's search (`get_lib_name_candidates`): with the
//! `cuda-13000` pin it tries `libnvrtc.so`, then `libnvrtc.so.13`, `.so.12`, … on the loader
//! path, so `LD_LIBRARY_PATH` picks it; [`version`] says which one was found.

use std::ffi::{CString, c_char, c_int};

use cudarc::nvrtc::result::{self as nvrtc, NvrtcError};
use cudarc::nvrtc::sys;
use tensormem_contract::{Error, Result};

use crate::error::BACKEND;
use crate::toolchain::{CodeTarget, CudaVersion};

fn nvrtc_err(api: &'static str, err: NvrtcError) -> Error {
    Error::Backend {
        backend: BACKEND,
        api,
        code: err.0 as i64,
        message: format!("{:?}", err.0),
    }
}

/// The loaded NVRTC's version (`nvrtcVersion`).
///
/// # Errors
/// A mapped NVRTC error.
pub(crate) fn version() -> Result<CudaVersion> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: both pointers are valid for writes for the duration of the call.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| nvrtc_err("nvrtcVersion", e))?;
    Ok(CudaVersion { major, minor })
}

/// The architectures the loaded NVRTC compiles for (`10 * major + minor`, ascending).
///
/// # Errors
/// A mapped NVRTC error.
pub(crate) fn supported_archs() -> Result<Vec<i32>> {
    let mut n: c_int = 0;
    // SAFETY: `n` is valid for writes.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| nvrtc_err("nvrtcGetNumSupportedArchs", e))?;
    let mut archs = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
    if archs.is_empty() {
        return Ok(Vec::new());
    }
    // SAFETY: `archs` holds the `n` entries NVRTC writes.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| nvrtc_err("nvrtcGetSupportedArchs", e))?;
    Ok(archs)
}

/// `nvrtcGetCUBINSize` / `nvrtcGetPTXSize`.
type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
/// `nvrtcGetCUBIN` / `nvrtcGetPTX`.
type GetFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;

/// An NVRTC program, destroyed on drop.
struct Program {
    prog: sys::nvrtcProgram,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `prog` came from nvrtcCreateProgram and is destroyed once; a failure to
        // destroy only leaks NVRTC's copy of the source.
        let _ = unsafe { nvrtc::destroy_program(self.prog) };
    }
}

impl Program {
    fn log(&self) -> String {
        // SAFETY: the program is live.
        match unsafe { nvrtc::get_program_log(self.prog) } {
            Ok(raw) => {
                let bytes: Vec<u8> = raw
                    .iter()
                    .take_while(|c| **c != 0)
                    .map(|c| *c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Err(e) => format!("(no log: {:?})", e.0),
        }
    }

    /// The compiled image: the cubin, or the PTX text with its terminating NUL (what
    /// `cuModuleLoadData` expects).
    fn image(&self, target: CodeTarget) -> Result<Vec<u8>> {
        let (size_fn, get_fn, api): (SizeFn, GetFn, &'static str) = match target {
            CodeTarget::Cubin { .. } => {
                (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN, "nvrtcGetCUBIN")
            }
            CodeTarget::Ptx { .. } => (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX, "nvrtcGetPTX"),
        };
        let mut size = 0usize;
        // SAFETY: the program compiled; `size` is valid for writes.
        unsafe { size_fn(self.prog, &mut size) }
            .result()
            .map_err(|e| nvrtc_err(api, e))?;
        let mut out = vec![0u8; size];
        // SAFETY: `out` holds the `size` bytes NVRTC reported.
        unsafe { get_fn(self.prog, out.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| nvrtc_err(api, e))?;
        Ok(out)
    }
}

/// Compiles CUDA C `src` (named `name` in diagnostics) for `target` with `options` besides the
/// architecture.
///
/// # Errors
/// [`Error::Backend`] with NVRTC's log when compilation fails;
/// [`tensormem_contract::ArgumentError::Invalid`] for a source or option containing NUL.
pub(crate) fn compile(
    src: &str,
    name: &str,
    target: CodeTarget,
    options: &[&str],
) -> Result<Vec<u8>> {
    let nul = |_| {
        tensormem_contract::ArgumentError::invalid_value(
            "cuda: kernel source or name",
            "text with a NUL byte",
            "no NUL bytes",
        )
    };
    let c_src = CString::new(src).map_err(nul)?;
    let c_name = CString::new(name).map_err(nul)?;
    let mut opts = vec![format!("--gpu-architecture={}", target.nvrtc_arch())];
    opts.extend(options.iter().map(|o| o.to_string()));
    if opts.iter().any(|o| o.contains('\0')) {
        let e = tensormem_contract::ArgumentError::invalid_value(
            "cuda: NVRTC option",
            "text with a NUL byte",
            "no NUL bytes",
        );
        return Err(e.into());
    }
    let prog = Program {
        prog: nvrtc::create_program(&c_src, Some(&c_name))
            .map_err(|e| nvrtc_err("nvrtcCreateProgram", e))?,
    };
    // SAFETY: `prog` is live; `c_src` and `c_name` outlive it (dropped after `prog`); the options
    // contain no NUL (checked above), so cudarc's CString conversion cannot fail.
    if let Err(e) = unsafe { nvrtc::compile_program(prog.prog, &opts) } {
        return Err(Error::Backend {
            backend: BACKEND,
            api: "nvrtcCompileProgram",
            code: e.0 as i64,
            message: format!("{:?} ({}): {}", e.0, opts.join(" "), prog.log()),
        });
    }
    let image = prog.image(target);
    drop(prog);
    drop((c_src, c_name));
    image
}
