//! Launch planning for the CUDA kernels: which kernel an [`Op`] runs, its argument list in the
//! order `kernels.cu` declares it, and its grid / block / shared-memory sizes.
//!
//! All of it is pure arithmetic, kept apart from the driver calls in `kernels.rs` so that it is
//! tested without a GPU (`launch/tests.rs`), including a check that every argument list matches
//! the parameter list parsed out of the CUDA source.

#![forbid(unsafe_code)]

use tensormem_contract::ops::{Op, WeightFormat};
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

/// The `s0..s3` arguments of `tm_permute`: for output axis `i`, the input stride (in elements) of
/// input axis `perm[i]`. Input strides are row-major over `dims`.
pub(crate) fn permute_strides(dims: [u32; 4], perm: [u8; 4]) -> [u64; 4] {
    let d = dims.map(u64::from);
    let in_stride = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
    perm.map(|p| in_stride[usize::from(p & 3)])
}

fn b(v: bool) -> Arg {
    Arg::U32(u32::from(v))
}

/// The weight operands of a weight-reading op whose weight is binding `w`: the weight pointer,
/// the scales pointer (0 unless int8), the index of the next binding, and the trailing
/// `fmt, group, groups` arguments of `tm_weight_at` for rows of `inner` elements.
fn weight_args(op: &Op, addrs: &[u64], w: usize, inner: u64) -> (Arg, Arg, usize, [Arg; 3]) {
    let format = op.weight_format();
    let code = match format {
        WeightFormat::F32 => 0,
        WeightFormat::F16 => 1,
        WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => 2,
    };
    // Group sizes are at most the row length, a checked u32 operand dimension.
    let (group, groups) = format.groups(inner.max(1));
    let tail = [
        Arg::U32(code),
        Arg::U32(group as u32),
        Arg::U32(groups as u32),
    ];
    if format.has_scales() {
        (Arg::Ptr(addrs[w]), Arg::Ptr(addrs[w + 1]), w + 2, tail)
    } else {
        (Arg::Ptr(addrs[w]), Arg::Ptr(0), w + 1, tail)
    }
}

/// The leading arguments `x, w, scales, bias, y` of an op that reads its input at binding 0 and
/// its weight from binding 1 on (see [`weight_args`]), then an optional bias and its output (a
/// null bias pointer without one), and the trailing `tm_weight_at` arguments.
fn weighted_args(op: &Op, addrs: &[u64], inner: u64, bias: bool) -> (Vec<Arg>, [Arg; 3]) {
    let p = |i: usize| Arg::Ptr(addrs[i]);
    let (w, scales, next, tail) = weight_args(op, addrs, 1, inner);
    let (bias_ptr, out) = if bias {
        (p(next), p(next + 1))
    } else {
        (Arg::Ptr(0), p(next))
    };
    (vec![p(0), w, scales, bias_ptr, out], tail)
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
    let call = |kernel, args, dims| KernelCall { kernel, args, dims };
    Ok(match *op {
        Op::MatMul {
            batch,
            m,
            n,
            k,
            trans_a,
            trans_b,
            broadcast_b,
            bias,
            alpha,
            ..
        } => {
            let (mut args, tail) = weighted_args(op, addrs, u64::from(k), bias);
            args.extend([
                Arg::U32(batch),
                Arg::U32(m),
                Arg::U32(n),
                Arg::U32(k),
                b(trans_a),
                b(trans_b),
                b(broadcast_b),
                b(bias),
                Arg::F32(alpha),
            ]);
            args.extend(tail);
            if let WeightFormat::Int8Dynamic { .. } = op.weight_format() {
                let elements = u64::from(batch) * u64::from(m) * u64::from(n);
                call("tm_matmul_dynamic", args, elementwise_dims(elements))
            } else {
                call("tm_matmul", args, matmul_dims(batch, m, n))
            }
        }
        Op::Add { len, b_len } | Op::Mul { len, b_len } => call(
            if matches!(op, Op::Add { .. }) {
                "tm_add"
            } else {
                "tm_mul"
            },
            vec![p(0), p(1), p(2), Arg::U32(len), Arg::U32(b_len)],
            elementwise_dims(u64::from(len)),
        ),
        Op::Scale { len, alpha } => call(
            "tm_scale",
            vec![p(0), p(1), Arg::U32(len), Arg::F32(alpha)],
            elementwise_dims(u64::from(len)),
        ),
        Op::Gelu { len } | Op::Relu { len } => call(
            if matches!(op, Op::Gelu { .. }) {
                "tm_gelu"
            } else {
                "tm_relu"
            },
            vec![p(0), p(1), Arg::U32(len)],
            elementwise_dims(u64::from(len)),
        ),
        Op::LayerNorm { rows, cols, eps } => call(
            "tm_layernorm",
            vec![
                p(0),
                p(1),
                p(2),
                p(3),
                Arg::U32(rows),
                Arg::U32(cols),
                Arg::F32(eps),
            ],
            row_dims(rows, cols),
        ),
        Op::Softmax {
            rows,
            cols,
            masked,
            rows_per_mask,
        } => {
            let (mask, out) = if masked {
                (p(1), p(2))
            } else {
                (Arg::Ptr(0), p(1))
            };
            call(
                "tm_softmax",
                vec![
                    p(0),
                    mask,
                    out,
                    Arg::U32(rows),
                    Arg::U32(cols),
                    b(masked),
                    Arg::U32(rows_per_mask.max(1)),
                ],
                row_dims(rows, cols),
            )
        }
        Op::Embedding {
            vocab, dim, rows, ..
        } => {
            let (table, scales, next, tail) = weight_args(op, addrs, 0, u64::from(dim));
            let mut args = vec![
                table,
                scales,
                p(next),
                p(next + 1),
                Arg::U32(vocab),
                Arg::U32(dim),
                Arg::U32(rows),
            ];
            args.extend(tail);
            call(
                "tm_embedding",
                args,
                elementwise_dims(u64::from(rows) * u64::from(dim)),
            )
        }
        Op::MeanPool { batch, seq, dim } => call(
            "tm_meanpool",
            vec![
                p(0),
                p(1),
                p(2),
                Arg::U32(batch),
                Arg::U32(seq),
                Arg::U32(dim),
            ],
            elementwise_dims(u64::from(batch) * u64::from(dim)),
        ),
        Op::L2Normalize { rows, cols, eps } => call(
            "tm_l2normalize",
            vec![p(0), p(1), Arg::U32(rows), Arg::U32(cols), Arg::F32(eps)],
            row_dims(rows, cols),
        ),
        Op::Conv2d {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            stride,
            pad,
            bias,
            ..
        } => {
            let (oh, ow) = op.conv_out()?;
            let inner = u64::from(c_in) * u64::from(kh) * u64::from(kw);
            let (mut args, tail) = weighted_args(op, addrs, inner, bias);
            args.extend([
                Arg::U32(n),
                Arg::U32(c_in),
                Arg::U32(h),
                Arg::U32(w),
                Arg::U32(c_out),
                Arg::U32(kh),
                Arg::U32(kw),
                Arg::U32(stride),
                Arg::U32(pad),
                b(bias),
                Arg::U32(oh),
                Arg::U32(ow),
            ]);
            args.extend(tail);
            call("tm_conv2d", args, elementwise_dims(sig.outputs[0].len))
        }
        Op::MaxPool2d {
            n,
            c,
            h,
            w,
            k,
            stride,
        } => {
            let (oh, ow) = op.conv_out()?;
            call(
                "tm_maxpool2d",
                vec![
                    p(0),
                    p(1),
                    Arg::U32(n),
                    Arg::U32(c),
                    Arg::U32(h),
                    Arg::U32(w),
                    Arg::U32(k),
                    Arg::U32(stride),
                    Arg::U32(oh),
                    Arg::U32(ow),
                ],
                elementwise_dims(sig.outputs[0].len),
            )
        }
        Op::Permute { dims, perm } => {
            let len = sig.outputs[0].len;
            let od = Op::permuted_dims(dims, perm);
            let s = permute_strides(dims, perm);
            let len32 = u32_arg(op, "len", len)?;
            let mut args = vec![p(0), p(1), Arg::U32(len32)];
            args.extend(od[1..].iter().map(|d| Arg::U32(*d)));
            for st in s {
                args.push(Arg::U32(u32_arg(op, "stride", st)?));
            }
            call("tm_permute", args, elementwise_dims(len))
        }
        Op::Copy { len } => call(
            "tm_copy",
            vec![p(0), p(1), Arg::U32(len)],
            elementwise_dims(u64::from(len)),
        ),
        Op::RmsNorm { .. }
        | Op::Rope { .. }
        | Op::SiluMul { .. }
        | Op::KvWrite { .. }
        | Op::PagedAttention { .. } => llm::plan_call(op, addrs, sig.outputs[0].len)
            .ok_or_else(|| Error::invariant("decoder ops have a plan", op.name()))?,
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

fn u32_arg(op: &Op, what: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::ArithmeticOverflow {
        what: format!("{}: {what} {v}", op.name()),
        limit_name: "the kernels' u32 element index",
    })
}

mod llm;
#[cfg(test)]
mod tests;
