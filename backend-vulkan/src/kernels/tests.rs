//! Unit tests of `kernels` (no device needed).

use super::*;

const SRC: &str = r#"
struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32, rest: array<vec4<u32>, 3> }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.n) { y[id.x] = x[id.x] * 2.0; }
}
"#;

#[test]
fn compiles_valid_wgsl_to_spirv() {
    let words = compile_wgsl(SRC, "main").expect("compiles");
    assert_eq!(words[0], 0x0723_0203, "SPIR-V magic number");
    assert!(words.len() > 50);
}

#[test]
fn parse_errors_carry_naga_diagnostics() {
    let err = compile_wgsl("fn main( {", "main").expect_err("bad WGSL");
    match err {
        Error::Backend { api, message, .. } => {
            assert_eq!(api, "naga::front::wgsl::parse_str");
            assert!(!message.is_empty());
        }
        other => panic!("wrong variant: {other}"),
    }
}

#[test]
fn validation_errors_are_reported() {
    // Type error: assigning a u32 to an f32 array.
    let src = SRC.replace("x[id.x] * 2.0", "id.x");
    let err = compile_wgsl(&src, "main").expect_err("invalid module");
    assert!(matches!(err, Error::Backend { .. }), "{err}");
}

#[test]
fn unknown_entry_point_is_an_error() {
    assert!(compile_wgsl(SRC, "nope").is_err());
}
