//! Launch planning for the CUDA kernels: which kernel an [`Op`] runs, its argument list in the
//! order `kernels.cu` declares it, and its grid / block / shared-memory sizes.
//!
//! All of it is pure arithmetic, kept apart from the driver calls in `kernels.rs` so that it is
//! tested without a GPU (`launch/tests.rs`), including a check that every argument list matches
//! the parameter list parsed out of the CUDA source.

#![forbid(unsafe_code)]

use tensormem_contract::ops::{Op, Scalar, WeightFormat};
use tensormem_contract::{Error, Result};

/// Threads per block of the element-wise kernels.
pub(crate) const ELEMENTWISE_BLOCK: u32 = 256;
/// Largest block of the row kernels (one block per row).
pub(crate) const ROW_BLOCK_MAX: u32 = 256;
/// Smallest block of the row kernels: one warp.
pub(crate) const ROW_BLOCK_MIN: u32 = 32;
/// Grid cap on every axis. Kernels loop grid-stride, so a capped grid is still correct; 65535 is
/// the `y`/`z` hardware limit and plenty of blocks to fill any current GPU along `x`.
pub(crate) const GRID_MAX: u32 = 65_535;
/// Matmul tile edge; must equal `TM_TILE` in `kernels.cu`.
pub(crate) const MATMUL_TILE: u32 = 16;

/// One kernel argument, in declaration order.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    /// A device address (`const float*`, `float*`, `const u32*`, ...). 0 for an absent operand.
    Ptr(u64),
    /// `unsigned int`.
    U32(u32),
    /// `unsigned long long`.
    U64(u64),
    /// `float`.
    F32(f32),
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct LaunchDims {
    /// Blocks per grid, `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Threads per block, `(x, y, z)`.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

/// Everything needed to launch one kernel.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct KernelCall {
    /// The `extern "C"` kernel name in `kernels.cu`.
    pub kernel: &'static str,
    /// Arguments in declaration order.
    pub args: Vec<Arg>,
    /// Launch geometry.
    pub dims: LaunchDims,
}

/// Every kernel `kernels.cu` defines; `kernels.rs` loads each of them at startup.
pub(crate) const KERNEL_NAMES: [&str; 22] = [
    "tm_matmul",
    "tm_matmul_dynamic",
    "tm_add",
    "tm_mul",
    "tm_scale",
    "tm_gelu",
    "tm_relu",
    "tm_layernorm",
    "tm_softmax",
    "tm_embedding",
    "tm_meanpool",
    "tm_l2normalize",
    "tm_conv2d",
    "tm_maxpool2d",
    "tm_permute",
    "tm_copy",
    "tm_fill_zero_bytes",
    "tm_rmsnorm",
    "tm_rope",
    "tm_silu_mul",
    "tm_kv_write",
    "tm_paged_attention",
];

fn blocks_for(elements: u64, per_block: u32) -> u32 {
    let blocks = elements.div_ceil(u64::from(per_block)).max(1);
    u32::try_from(blocks.min(u64::from(GRID_MAX))).unwrap_or(GRID_MAX)
}

/// Geometry of a grid-stride element-wise kernel over `elements` items.
pub(crate) fn elementwise_dims(elements: u64) -> LaunchDims {
    LaunchDims {
        grid: (blocks_for(elements, ELEMENTWISE_BLOCK), 1, 1),
        block: (ELEMENTWISE_BLOCK, 1, 1),
        shared_bytes: 0,
    }
}

/// Geometry of a row kernel (one block per row, grid-stride over rows): the block is the
/// smallest power of two `>= cols`, clamped to `[ROW_BLOCK_MIN, ROW_BLOCK_MAX]` (the block
/// reductions need a power of two), with one `f32` of shared memory per thread.
pub(crate) fn row_dims(rows: u32, cols: u32) -> LaunchDims {
    let threads = cols
        .checked_next_power_of_two()
        .unwrap_or(ROW_BLOCK_MAX)
        .clamp(ROW_BLOCK_MIN, ROW_BLOCK_MAX);
    LaunchDims {
        grid: (rows.clamp(1, GRID_MAX), 1, 1),
        block: (threads, 1, 1),
        shared_bytes: threads * 4,
    }
}

/// Geometry of the tiled matmul: one 16x16 block per output tile, `z` over batches.
pub(crate) fn matmul_dims(batch: u32, m: u32, n: u32) -> LaunchDims {
    let tiles = |d: u32| d.div_ceil(MATMUL_TILE).clamp(1, GRID_MAX);
    LaunchDims {
        grid: (tiles(n), tiles(m), batch.clamp(1, GRID_MAX)),
        block: (MATMUL_TILE, MATMUL_TILE, 1),
        shared_bytes: 0,
    }
}

/// An op's kernel parameter as a kernel argument.
impl From<Scalar> for Arg {
    fn from(v: Scalar) -> Arg {
        match v {
            Scalar::U32(v) => Arg::U32(v),
            Scalar::F32(v) => Arg::F32(v),
        }
    }
}

/// The pointer arguments `x, w, scales, bias, y` of an op that reads its input at binding 0 and
/// its weight from binding 1 on: a null scales pointer unless the weight has scales, a null bias
/// pointer without a bias, then the output.
fn weighted_ptrs(op: &Op, addrs: &[u64], bias: bool) -> Vec<Arg> {
    let p = |i: usize| Arg::Ptr(addrs[i]);
    let (scales, next) = if op.weight_format().has_scales() {
        (p(2), 3)
    } else {
        (Arg::Ptr(0), 2)
    };
    let (bias, out) = if bias {
        (p(next), p(next + 1))
    } else {
        (Arg::Ptr(0), p(next))
    };
    vec![p(0), p(1), scales, bias, out]
}

/// Plans the launch of `op` over `addrs`, the device addresses of its bindings (inputs, then
/// outputs, as [`Op::signature`] orders them; the caller has checked them with
/// [`check_bindings`]).
///
/// # Errors
/// [`tensormem_contract::ArgumentError`] when the op's parameters are invalid (from [`Op::signature`] or
/// [`Op::conv_out`]), [`Error::BindingCount`] when `addrs` has the wrong length.
pub(crate) fn plan_call(op: &Op, addrs: &[u64]) -> Result<KernelCall> {
    let sig = op.signature()?;
    let count = sig.inputs.len() + sig.outputs.len();
    if addrs.len() != count {
        return Err(op.binding_count(count, addrs.len()));
    }
    let p = |i: usize| Arg::Ptr(addrs[i]);
    // The pointers in the kernel's order (absent optional operands as null), then the op's
    // shared kernel parameters (`Op::kernel_scalars`).
    let scalars = op.kernel_scalars()?.into_iter().map(Arg::from);
    let call = |kernel, mut args: Vec<Arg>, dims| {
        args.extend(scalars);
        KernelCall { kernel, args, dims }
    };
    let elements = |n: u32| elementwise_dims(u64::from(n));
    Ok(match *op {
        Op::MatMul {
            batch, m, n, bias, ..
        } => {
            let args = weighted_ptrs(op, addrs, bias);
            if let WeightFormat::Int8Dynamic { .. } = op.weight_format() {
                let outputs = u64::from(batch) * u64::from(m) * u64::from(n);
                call("tm_matmul_dynamic", args, elementwise_dims(outputs))
            } else {
                call("tm_matmul", args, matmul_dims(batch, m, n))
            }
        }
        Op::Add { len, .. } => call("tm_add", vec![p(0), p(1), p(2)], elements(len)),
        Op::Mul { len, .. } => call("tm_mul", vec![p(0), p(1), p(2)], elements(len)),
        Op::Scale { len, .. } => call("tm_scale", vec![p(0), p(1)], elements(len)),
        Op::Gelu { len } => call("tm_gelu", vec![p(0), p(1)], elements(len)),
        Op::Relu { len } => call("tm_relu", vec![p(0), p(1)], elements(len)),
        Op::Copy { len } => call("tm_copy", vec![p(0), p(1)], elements(len)),
        Op::LayerNorm { rows, cols, .. } => call(
            "tm_layernorm",
            vec![p(0), p(1), p(2), p(3)],
            row_dims(rows, cols),
        ),
        Op::Softmax {
            rows, cols, masked, ..
        } => {
            let ptrs = if masked {
                vec![p(0), p(1), p(2)]
            } else {
                vec![p(0), Arg::Ptr(0), p(1)]
            };
            call("tm_softmax", ptrs, row_dims(rows, cols))
        }
        Op::Embedding { rows, dim, .. } => {
            let ptrs = if op.weight_format().has_scales() {
                vec![p(0), p(1), p(2), p(3)]
            } else {
                vec![p(0), Arg::Ptr(0), p(1), p(2)]
            };
            let outputs = u64::from(rows) * u64::from(dim);
            call("tm_embedding", ptrs, elementwise_dims(outputs))
        }
        Op::MeanPool { batch, dim, .. } => {
            let outputs = u64::from(batch) * u64::from(dim);
            call(
                "tm_meanpool",
                vec![p(0), p(1), p(2)],
                elementwise_dims(outputs),
            )
        }
        Op::L2Normalize { rows, cols, .. } => {
            call("tm_l2normalize", vec![p(0), p(1)], row_dims(rows, cols))
        }
        Op::Conv2d { bias, .. } => {
            let args = weighted_ptrs(op, addrs, bias);
            call("tm_conv2d", args, elementwise_dims(sig.outputs[0].len))
        }
        Op::MaxPool2d { .. } => call(
            "tm_maxpool2d",
            vec![p(0), p(1)],
            elementwise_dims(sig.outputs[0].len),
        ),
        Op::Permute { .. } => call(
            "tm_permute",
            vec![p(0), p(1)],
            elementwise_dims(sig.outputs[0].len),
        ),
        Op::RmsNorm { .. }
        | Op::Rope { .. }
        | Op::SiluMul { .. }
        | Op::KvWrite { .. }
        | Op::PagedAttention { .. } => {
            let (kernel, ptrs, extra, dims) = llm::plan(op, addrs, sig.outputs[0].len)
                .ok_or_else(|| Error::invariant("decoder ops have a plan", op.name()))?;
            let mut launch = call(kernel, ptrs, dims);
            launch.args.extend(extra);
            launch
        }
    })
}

/// The launch of `tm_fill_zero_bytes` over `size` bytes at device address `addr`.
pub(crate) fn plan_fill_zero(addr: u64, size: u64) -> KernelCall {
    KernelCall {
        kernel: "tm_fill_zero_bytes",
        args: vec![Arg::Ptr(addr), Arg::U64(size)],
        dims: elementwise_dims(size),
    }
}

mod llm;
#[cfg(test)]
mod tests;
