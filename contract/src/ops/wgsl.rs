//! WGSL sources of the standard ops and their binding ABI (used by wgpu, and by Vulkan through naga).
//!
//! [`kernel`] turns an [`Op`] into everything a GPU backend needs to dispatch it: which source
//! (and pipeline) to use, the 16-word uniform block, and the workgroup counts. The sources live in
//! `ops/wgsl/*.wgsl` and are assembled at compile time (`sources`): `common.wgsl`, a binding
//! header generated from the operand list, shared pieces (`element.wgsl`, `reduce.wgsl`,
//! `erf.wgsl`, a weight format's `w_at`) and the kernel's body. They use only core WGSL: no f16,
//! no subgroups, no atomics, no push constants.
//!
//! # Binding ABI
//!
//! For an op with `n` operands (its inputs, then its outputs, in [`Op::signature`] order):
//!
//! | binding | what | declared as |
//! |---|---|---|
//! | `@group(0) @binding(i)`, `i < n` | operand `i` | `var<storage, read_write> name: array<f32>` (`array<u32>` for token ids and for [`Op::Copy`]) |
//! | `@group(0) @binding(n)` | parameters | `var<uniform> p: Params`, `struct Params { v: array<vec4<u32>, 4> }` (64 bytes) |
//!
//! - Each operand is bound with exactly its size (a multiple of 4 bytes, at the device's storage
//!   offset alignment), so a kernel indexes from 0. Operands must not overlap.
//! - **Every operand is `read_write`, inputs included**: wgpu tracks usage per buffer, not per
//!   range, and rejects one buffer bound both read-only and read-write, while sub-allocated
//!   tensors often share a buffer. Bind group layouts have `read_only: false` throughout.
//! - Parameters are 16 `u32` ([`Kernel::params`], layout per key in [`Kernel`]'s doc); f32
//!   parameters are stored as their bits. Entry point `main`; 1-D kernels use
//!   `@workgroup_size(64)` ([`WORKGROUP_SIZE`]), matmul 8×8 per 32×32 tile. Workgroup counts
//!   above [`MAX_WORKGROUPS_PER_DIM`] spill into y; every kernel bounds-checks.
//! - Per operand at most 2³² − 1 elements; at most 6 storage bindings per kernel.
//! - **Weight formats** ([`WeightFormat`]): the weight operand of matmul, conv2d and embedding
//!   is `array<f32>`, or `array<u32>` holding two f16 or four int8 per word (int8 adds an f32
//!   `scales` operand after it). Each variant's `weight_*.wgsl` defines `w_at`; the shared bodies
//!   dequantise as they load, so no f32 copy of a weight exists on the device.
//!
//! Numerics match the host reference (`ops::host`) formula for formula; sums run per invocation
//! in the host's order (matmul, conv, meanpool) or as a workgroup tree (row kernels). `exp`,
//! division and `sqrt` are within WGSL's few-ulp bounds, so compare with a tolerance (~1e-5).
//! Rotary angles are the host's bit for bit; paged attention folds 64 positions at a time into
//! the online softmax; KV writes store the host's bytes (an int8 byte may differ by one where a
//! division rounds differently).

use crate::ops::{Op, WeightFormat};
use crate::{Error, Result};

#[cfg(test)]
mod tests;

/// Invocations per workgroup of the 1-D kernels (matmul uses 8×8, also 64).
pub const WORKGROUP_SIZE: u32 = 64;

/// Largest workgroup count per dimension that every WebGPU device accepts
/// (`maxComputeWorkgroupsPerDimension`'s default and minimum).
pub const MAX_WORKGROUPS_PER_DIM: u32 = 65_535;

/// Side of matmul's output tile (each workgroup computes `MATMUL_TILE × MATMUL_TILE` of C).
pub const MATMUL_TILE: u32 = 32;

/// Everything needed to dispatch one op on a WGSL backend.
///
/// Operands and parameter words per key. The words start with the op's shared kernel
/// parameters ([`Op::kernel_scalars`], f32 as bits; word `i` is `p.v[i / 4][i % 4]` in WGSL),
/// then the words in the last column but one, which only this path needs:
///
/// | key | operands | own words | one invocation / workgroup per |
/// |---|---|---|---|
/// | `matmul`, `matmul_bias` (+ `_f16`, `_int8`) | a, b, (scales), (bias), c | tiles_n, tiles_m | 32×32 tile of c (8×8 workgroup) |
/// | `matmul_int8_dynamic`, `matmul_bias_int8_dynamic` | a, b, scales, (bias), c | tiles_n, tiles_m, batch·m·n | element of c |
/// | `add`, `mul`, `scale`, `gelu`, `relu`, `silu_mul` | inputs, output | — | element |
/// | `copy` | x, y (u32) | — | element |
/// | `layernorm`, `rmsnorm` | x, gamma (weight), (beta), y | — | row (workgroup) |
/// | `softmax`, `softmax_masked` | x, (mask), y | — | row (workgroup) |
/// | `embedding` (+ `_f16`, `_int8`) | table, (scales), ids (u32), y | rows·dim | element |
/// | `meanpool` | x, mask, y | batch·dim | output element (loops over seq) |
/// | `l2normalize` | x, y | — | row (workgroup) |
/// | `conv2d`, `conv2d_bias` (+ `_f16`, `_int8`) | x, weight, (scales), (bias), y | n·c_out·oh·ow | output element |
/// | `maxpool2d` | x, y | n·c·oh·ow | output element |
/// | `permute` | x, y | — | element |
/// | `rope` | x, positions (u32), y | len, r_hi, r_lo (`r = θ^(−2/head_dim)`), 0 | element |
/// | `kv_write` | k, v, slots (u32), segment (u32 words) | groups, scales_at, tokens·groups | (token, K/V-head group); a block's first token writes all of its tokens |
/// | `paged_attention`, `paged_attention_carry` | q, segment (u32 words), tables, meta, (carry), y | — | (token, query head) (workgroup) |
///
/// - **KV segments** ([`Op::KvWrite`], [`Op::PagedAttention`]) are bound as `array<u32>` over the
///   segment's bytes (`kv.wgsl` reads f32, f16 and int8 elements and unaligned int8 scales out of
///   words; dtype codes 0 f32, 1 f16, 2 int8). `kv_write` updates the segment in place with
///   read-modify-write of whole words, each word owned by one invocation (see `kv_write.wgsl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Pipeline cache key: the source variant (op kind plus optional operands, e.g. `matmul_bias`).
    /// Equal keys mean equal `source`, entry point and binding layout.
    pub key: &'static str,
    /// Complete WGSL module.
    pub source: &'static str,
    /// Entry point name (`main`).
    pub entry_point: &'static str,
    /// The uniform block, bound at `@binding(bindings)`; layout per key in the type's doc.
    pub params: [u32; 16],
    /// Workgroup counts for `dispatch_workgroups(x, y, z)`; each at most [`MAX_WORKGROUPS_PER_DIM`].
    pub workgroups: [u32; 3],
    /// Number of storage bindings (operands): `@binding(0..bindings)`.
    pub bindings: usize,
}

impl Kernel {
    /// The uniform block as the 64 bytes to upload.
    pub fn params_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.params)
    }
}

mod llm;
mod sources;

use sources::{
    ADD, CONV2D, CONV2D_BIAS, COPY, EMBEDDING, GELU, L2NORMALIZE, LAYERNORM, MATMUL, MATMUL_BIAS,
    MATMUL_DYNAMIC, MATMUL_DYNAMIC_BIAS, MAXPOOL2D, MEANPOOL, MUL, PERMUTE, RELU, SCALE, SOFTMAX,
    SOFTMAX_MASKED, SOURCES, Variants,
};

/// Every kernel source as `(key, source)`, e.g. to compile all pipelines up front.
pub fn sources() -> &'static [(&'static str, &'static str)] {
    SOURCES
}

/// The kernel, parameters and workgroup counts that compute `op`.
///
/// # Errors
/// [`crate::ArgumentError`] for an op whose parameters are invalid ([`Op::signature`]) or whose
/// dispatch would need more than 65535² workgroups; [`Error::TooLarge`] for an operand of more
/// than 2³² − 1 elements (kernels index in u32).
pub fn kernel(op: &Op) -> Result<Kernel> {
    let sig = op.signature()?;
    // Output element count; it fits in u32 (`Op::signature` refuses larger operands).
    let out_len = sig.outputs[0].len as u32;
    let per_element = u64::from(out_len).div_ceil(u64::from(WORKGROUP_SIZE));
    // The op's shared kernel parameters first (`Op::kernel_scalars`), then this path's own.
    let scalars = op.kernel_scalars()?;
    let mut p = [0u32; 16];
    if scalars.len() > p.len() {
        return Err(Error::invariant(
            "kernel parameters fit 16 words",
            op.name(),
        ));
    }
    for (word, v) in p.iter_mut().zip(&scalars) {
        *word = v.bits();
    }
    let own = scalars.len();
    let mut push = |words: &[u32]| p[own..own + words.len()].copy_from_slice(words);
    let variant = |v: Variants| match op.weight_format() {
        WeightFormat::F32 => v[0],
        WeightFormat::F16 => v[1],
        WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => v[2],
    };
    let (source, groups) = match *op {
        Op::MatMul {
            batch, m, n, bias, ..
        } => {
            let (tiles_n, tiles_m) = (n.div_ceil(MATMUL_TILE), m.div_ceil(MATMUL_TILE));
            if let WeightFormat::Int8Dynamic { .. } = op.weight_format() {
                push(&[tiles_n, tiles_m, out_len]);
                let source = if bias {
                    MATMUL_DYNAMIC_BIAS
                } else {
                    MATMUL_DYNAMIC
                };
                (source, per_element)
            } else {
                push(&[tiles_n, tiles_m]);
                let groups = u64::from(tiles_n) * u64::from(tiles_m) * u64::from(batch);
                (variant(if bias { MATMUL_BIAS } else { MATMUL }), groups)
            }
        }
        Op::Add { .. } => (ADD, per_element),
        Op::Mul { .. } => (MUL, per_element),
        Op::Scale { .. } => (SCALE, per_element),
        Op::Gelu { .. } => (GELU, per_element),
        Op::Relu { .. } => (RELU, per_element),
        Op::Copy { .. } => (COPY, per_element),
        Op::LayerNorm { rows, .. } => (LAYERNORM, u64::from(rows)),
        Op::Softmax { rows, masked, .. } => {
            let source = if masked { SOFTMAX_MASKED } else { SOFTMAX };
            (source, u64::from(rows))
        }
        Op::Embedding { .. } => {
            push(&[out_len]);
            (variant(EMBEDDING), per_element)
        }
        Op::MeanPool { .. } => {
            push(&[out_len]);
            (MEANPOOL, per_element)
        }
        Op::L2Normalize { rows, .. } => (L2NORMALIZE, u64::from(rows)),
        Op::Conv2d { bias, .. } => {
            push(&[out_len]);
            (
                variant(if bias { CONV2D_BIAS } else { CONV2D }),
                per_element,
            )
        }
        Op::MaxPool2d { .. } => {
            push(&[out_len]);
            (MAXPOOL2D, per_element)
        }
        Op::Permute { .. } => (PERMUTE, per_element),
        _ => llm::kernel(op, out_len, &mut push).ok_or_else(|| {
            Error::invariant(
                "every op has a WGSL kernel",
                format!("{} reached no kernel", op.name()),
            )
        })?,
    };
    Ok(Kernel {
        key: source.0,
        source: source.1,
        entry_point: "main",
        params: p,
        workgroups: spill(op, groups)?,
        bindings: sig.inputs.len() + sig.outputs.len(),
    })
}

/// Lays `groups` workgroups out as `[x, y, 1]`, spilling into y past [`MAX_WORKGROUPS_PER_DIM`].
/// Kernels number workgroups `x + y·num_x`; the surplus of `x·y` over `groups` is bounds-checked.
fn spill(op: &Op, groups: u64) -> Result<[u32; 3]> {
    let max = u64::from(MAX_WORKGROUPS_PER_DIM);
    debug_assert!(groups > 0, "signature() rejects zero dimensions");
    if groups <= max {
        return Ok([groups as u32, 1, 1]);
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(Error::TooLarge {
            what: op.name(),
            requested: groups,
            limit: max * max,
            limit_name: "workgroups of one dispatch (65535 x 65535)",
        });
    }
    Ok([MAX_WORKGROUPS_PER_DIM, y as u32, 1])
}
