use std::process::Command;

use super::*;

/// Declarations that let a host C++ compiler parse the CUDA source: the execution-space
/// qualifiers become nothing, the built-in index variables and intrinsics are declared.
const SHIM: &str = r#"
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
struct tm_dim3 { unsigned int x, y, z; };
extern tm_dim3 threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() {}
float __int_as_float(int);
float erff(float);
float expf(float);
float sqrtf(float);
float fmaxf(float, float);
float fminf(float, float);
float fabsf(float);
float roundf(float);
float rintf(float);
float __fmul_rn(float, float);
float __fadd_rn(float, float);
float __fdiv_rn(float, float);
float sinf(float);
float cosf(float);
double pow(double, double);
int __float_as_int(float);
"#;

/// The CUDA source parses as C++ under the shim: catches syntax and type errors (undeclared
/// names, wrong argument counts, pointer/integer mix-ups) without NVRTC or a GPU.
#[test]
fn cuda_source_passes_a_host_compiler_syntax_check() {
    let dir = std::env::temp_dir().join(format!("tensormem-cuda-syntax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kernels_shim.cpp");
    std::fs::write(&file, format!("{SHIM}\n#line 1 \"kernels.cu\"\n{SOURCE}")).unwrap();
    let compiler = ["g++", "clang++", "c++"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("a host C++ compiler (g++ or clang++) is needed for the CUDA source check");
    let out = Command::new(compiler)
        .args(["-std=c++14", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"])
        .arg("-Wno-unused-parameter")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{compiler} rejected kernels.cu:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// NVRTC has no standard headers by default: the source must not include any.
#[test]
fn cuda_source_is_self_contained() {
    assert!(!SOURCE.contains("#include"));
    let opens = SOURCE.matches('{').count();
    let closes = SOURCE.matches('}').count();
    assert_eq!(opens, closes, "unbalanced braces in kernels.cu");
}

/// The matmul tile in the source agrees with the launch math.
#[test]
fn tile_size_agrees_with_launch_math() {
    let line = SOURCE
        .lines()
        .find(|l| l.starts_with("#define TM_TILE "))
        .unwrap();
    let tile: u32 = line["#define TM_TILE ".len()..].trim().parse().unwrap();
    assert_eq!(tile, crate::launch::MATMUL_TILE);
}

#[test]
fn a_module_the_driver_cannot_take_names_the_versions() {
    use cudarc::driver::DriverError;
    use cudarc::driver::sys::CUresult;

    use crate::toolchain::{CodeTarget, CudaVersion, Toolchain};

    let tools = Toolchain {
        driver: CudaVersion {
            major: 13,
            minor: 0,
        },
        nvrtc: CudaVersion {
            major: 13,
            minor: 2,
        },
    };
    let target = CodeTarget::Ptx { arch: 90 };
    let err = map_load_err(
        DriverError(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION),
        target,
        tools,
    );
    let Error::BackendUnavailable { reason, .. } = err else {
        panic!("expected BackendUnavailable, got {err:?}");
    };
    for needle in [
        "UNSUPPORTED_PTX_VERSION",
        "compute_90",
        "NVRTC 13.2",
        "CUDA 13.0",
    ] {
        assert!(reason.contains(needle), "{needle} missing in {reason}");
    }
    // Other failures keep their code.
    assert!(matches!(
        map_load_err(
            DriverError(CUresult::CUDA_ERROR_INVALID_VALUE),
            target,
            tools
        ),
        Error::Backend {
            api: "cuModuleLoadData",
            ..
        }
    ));
}
