//! The standard op set, defined once as data.
//!
//! Each backend dispatches an [`Op`] over [`BlockRange`](crate::backend::BlockRange) bindings: the
//! op's inputs, then its outputs, in the order [`Op::signature`] lists them. The host
//! implementations (`tensormem-host`'s `kernels`, re-exported as `tensormem::ops::host`) are the
//! numerical reference every backend is checked against; the WGSL sources (`ops::wgsl`) serve
//! wgpu directly and Vulkan through naga.
//!
//! Shapes are element counts in `u32` (kernels index with 32-bit integers); every tensor is
//! contiguous, row-major. Reshapes are free (a tensor's bytes do not move); transposes and
//! permutations are explicit [`Op::Permute`] copies.

use crate::{Error, Result};

#[doc(hidden)]
pub mod cpu;
mod kv;
mod operand;
mod params;
pub mod quant;
mod shapes;
mod signature;
#[doc(hidden)]
pub mod split;
pub mod wgsl;

pub use kv::{KvDType, KvLayout};
pub use operand::{DType, Operand, Signature};
pub use params::{Scalar, permute_strides};
pub use quant::WeightFormat;

/// A standard op with its parameters. All f32 unless stated.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Batched matrix product `C[b] = alpha * op(A[b]) · op(B[b]) (+ bias)`, where `op` transposes
    /// when asked. Inputs: `A` (`[batch, m, k]`, or `[batch, k, m]` with `trans_a`), `B`
    /// (`[batch, k, n]`, or `[batch, n, k]` with `trans_b`; with `broadcast_b` a single `B` shared by
    /// every batch), then `bias` `[n]` when `bias` is set. Output `C` `[batch, m, n]`.
    /// A PyTorch `Linear` is `trans_b = true, broadcast_b = true, bias = true`. `B` is stored in
    /// `weight_format`; int8 adds a `scales` input `[b_batch · n, groups]` right after `B` (see
    /// [`quant`]).
    MatMul {
        /// Number of independent products.
        batch: u32,
        /// Rows of `C`.
        m: u32,
        /// Columns of `C`.
        n: u32,
        /// Inner dimension.
        k: u32,
        /// Read `A` as `[k, m]`.
        trans_a: bool,
        /// Read `B` as `[n, k]`.
        trans_b: bool,
        /// One `B` for every batch.
        broadcast_b: bool,
        /// Add a bias `[n]` to every row (after scaling).
        bias: bool,
        /// Scale applied to the product.
        alpha: f32,
        /// How `B` is stored.
        weight_format: WeightFormat,
    },
    /// `c[i] = a[i] + b[i % b_len]` over `len` elements (`b_len` divides `len`; `b_len == len` is
    /// plain addition, smaller `b_len` broadcasts a bias or a position table).
    Add {
        /// Elements of `a` and `c`.
        len: u32,
        /// Elements of `b`.
        b_len: u32,
    },
    /// `c[i] = a[i] * b[i % b_len]`, as [`Op::Add`].
    Mul {
        /// Elements of `a` and `c`.
        len: u32,
        /// Elements of `b`.
        b_len: u32,
    },
    /// `y[i] = alpha * x[i]`.
    Scale {
        /// Elements.
        len: u32,
        /// Factor.
        alpha: f32,
    },
    /// Exact GELU, `y = x/2 · (1 + erf(x/√2))`.
    Gelu {
        /// Elements.
        len: u32,
    },
    /// `y = max(x, 0)`.
    Relu {
        /// Elements.
        len: u32,
    },
    /// Layer normalisation over the last axis: inputs `x` `[rows, cols]`, `gamma` `[cols]`,
    /// `beta` `[cols]`; output `y` `[rows, cols]`. Population variance, as PyTorch.
    LayerNorm {
        /// Rows.
        rows: u32,
        /// Normalised axis length.
        cols: u32,
        /// Added to the variance.
        eps: f32,
    },
    /// Softmax over the last axis of `x` `[rows, cols]`. With `masked`, a second input `mask`
    /// `[rows / rows_per_mask, cols]` (1.0 keep, 0.0 drop) removes columns: mask row
    /// `r / rows_per_mask` applies to row `r` (attention: `rows_per_mask = heads · seq`). A row whose
    /// mask drops every column is all zeros.
    Softmax {
        /// Rows.
        rows: u32,
        /// Columns (softmax axis).
        cols: u32,
        /// Whether a mask input follows `x`.
        masked: bool,
        /// Rows sharing one mask row (ignored without a mask; at least 1).
        rows_per_mask: u32,
    },
    /// Row gather: inputs `table` `[vocab, dim]` (stored in `weight_format`; int8 adds `scales`
    /// `[vocab, groups]` after it) and `ids` `[rows]` (u32); output `[rows, dim]` (f32). An id
    /// `>= vocab` yields a row of zeros (kernels cannot fail).
    Embedding {
        /// Rows of the table.
        vocab: u32,
        /// Row length.
        dim: u32,
        /// Number of ids.
        rows: u32,
        /// How the table is stored.
        weight_format: WeightFormat,
    },
    /// Masked mean over the sequence axis: inputs `x` `[batch, seq, dim]`, `mask` `[batch, seq]`
    /// (1.0 / 0.0); output `[batch, dim]` = Σ mask·x / max(Σ mask, 1e-9).
    MeanPool {
        /// Batch size.
        batch: u32,
        /// Sequence length.
        seq: u32,
        /// Feature size.
        dim: u32,
    },
    /// Row-wise L2 normalisation: `y = x / max(‖x‖₂, eps)` over `[rows, cols]`.
    L2Normalize {
        /// Rows.
        rows: u32,
        /// Row length.
        cols: u32,
        /// Lower bound of the norm.
        eps: f32,
    },
    /// 2-D convolution, NCHW, cross-correlation as PyTorch: inputs `x` `[n, c_in, h, w]`, `weight`
    /// `[c_out, c_in, kh, kw]` stored in `weight_format` (int8 adds `scales` `[c_out, groups]` after
    /// it), then `bias` `[c_out]` when `bias` is set; output
    /// `[n, c_out, oh, ow]` with `oh = (h + 2·pad − kh) / stride + 1` (same for `ow`).
    Conv2d {
        /// Batch.
        n: u32,
        /// Input channels.
        c_in: u32,
        /// Input height.
        h: u32,
        /// Input width.
        w: u32,
        /// Output channels.
        c_out: u32,
        /// Kernel height.
        kh: u32,
        /// Kernel width.
        kw: u32,
        /// Stride (both axes).
        stride: u32,
        /// Zero padding (both axes).
        pad: u32,
        /// Whether a bias input follows the weight.
        bias: bool,
        /// How the weight is stored.
        weight_format: WeightFormat,
    },
    /// Max pooling, NCHW, no padding: input `[n, c, h, w]`, output `[n, c, oh, ow]` with
    /// `oh = (h − k) / stride + 1`.
    MaxPool2d {
        /// Batch.
        n: u32,
        /// Channels.
        c: u32,
        /// Input height.
        h: u32,
        /// Input width.
        w: u32,
        /// Window size.
        k: u32,
        /// Stride.
        stride: u32,
    },
    /// Axis permutation of a 4-D f32 tensor `x` of shape `dims`: output axis `i` is input axis
    /// `perm[i]`. Transposes and head splits/merges of smaller ranks pad the shape with 1s.
    Permute {
        /// Input shape.
        dims: [u32; 4],
        /// Output axis `i` takes input axis `perm[i]`.
        perm: [u8; 4],
    },
    /// Root-mean-square normalisation over the last axis, as Llama's RMSNorm: inputs `x`
    /// `[rows, cols]` and `weight` `[cols]`; output `y = x / √(mean(x²) + eps) · weight`.
    RmsNorm {
        /// Rows.
        rows: u32,
        /// Normalised axis length.
        cols: u32,
        /// Added to the mean square.
        eps: f32,
    },
    /// Rotary position embedding in the rotate-half form (Hugging Face's Llama): inputs `x`
    /// `[tokens, heads · head_dim]` and `positions` `[tokens]` (u32); output `y` of `x`'s shape.
    /// In each head, element `i < head_dim / 2` pairs with `i + head_dim / 2`, rotated by the
    /// angle `position · theta^(−2i / head_dim)`.
    Rope {
        /// Tokens.
        tokens: u32,
        /// Heads per token.
        heads: u32,
        /// Elements per head (even).
        head_dim: u32,
        /// Base of the rotation frequencies (`rope_theta`).
        theta: f32,
    },
    /// The SwiGLU gate `y[i] = silu(gate[i]) · up[i]`, `silu(x) = x / (1 + e^−x)`: inputs `gate`
    /// and `up`, output `y`, each of `len`.
    SiluMul {
        /// Elements.
        len: u32,
    },
    /// Writes the keys and values of `tokens` tokens of one layer into a segment of a paged KV
    /// cache, in place: inputs `k` and `v` `[tokens, kv_heads · head_dim]` and `slots` `[tokens]`
    /// (u32, `block · block_tokens + offset` within the segment; a slot past the segment is
    /// skipped); output the segment itself, `blocks · stride` bytes of u8, of which only the
    /// written slots (and, for int8, their heads' scales and earlier tokens) change
    /// ([`Op::updates_output`]). Tokens of one block are written in order.
    KvWrite {
        /// The blocks' layout.
        kv: KvLayout,
        /// Blocks in the segment.
        blocks: u32,
        /// Bytes from one block to the next (a multiple of 4, at least the block's bytes).
        stride: u32,
        /// The layer written.
        layer: u32,
        /// Tokens written.
        tokens: u32,
    },
    /// Paged attention of `tokens` query tokens over the blocks of one KV segment, with the online
    /// softmax's state carried from segment to segment. Inputs: `q` `[tokens, q_heads · head_dim]`,
    /// the segment (u8, `blocks · stride`), `tables` `[rows, width]` (u32 global block ids),
    /// `meta` `[tokens, 2]` (u32: the token's table row and how many positions it sees, causal),
    /// then `carry` when `carry_in`. Output: the state `[tokens, q_heads, head_dim + 2]` (running
    /// maximum, running sum, unnormalised sum of values) when `carry_out`, else the attention
    /// `[tokens, q_heads · head_dim]`. Blocks outside `first_block .. first_block + blocks` are
    /// left to the other segments' dispatches; query head `h` reads KV head
    /// `h / (q_heads / kv_heads)`; a token that sees no position gets zeros.
    PagedAttention {
        /// The blocks' layout.
        kv: KvLayout,
        /// Blocks in the segment.
        blocks: u32,
        /// Bytes from one block to the next.
        stride: u32,
        /// Global id of the segment's first block.
        first_block: u32,
        /// The layer read.
        layer: u32,
        /// Query tokens.
        tokens: u32,
        /// Query heads (a multiple of the layout's KV heads).
        q_heads: u32,
        /// Rows of the block table.
        rows: u32,
        /// Blocks per table row.
        width: u32,
        /// Score scale (`1 / √head_dim`).
        scale: f32,
        /// A `carry` state input follows `meta`.
        carry_in: bool,
        /// Output the state instead of the attention.
        carry_out: bool,
    },
    /// `y = x` over `len` elements of 4 bytes (any 32-bit dtype).
    Copy {
        /// Elements.
        len: u32,
    },
}

impl Op {
    /// A PyTorch `Linear` over `m` rows: `y = x · Wᵀ + bias` for `x` `[m, k]`, an f32 weight `W`
    /// `[n, k]` and `bias` `[n]`, as [`Op::MatMul`] with batch 1, `trans_b`, `broadcast_b`, `bias`
    /// and alpha 1.
    pub fn linear(m: u32, n: u32, k: u32) -> Op {
        Op::MatMul {
            batch: 1,
            m,
            n,
            k,
            trans_a: false,
            trans_b: true,
            broadcast_b: true,
            bias: true,
            alpha: 1.0,
            weight_format: WeightFormat::F32,
        }
    }

    /// `batch` plain products `C = A · B` of an `[m, k]` by a `[k, n]` matrix, the weight `B` in
    /// f32: [`Op::MatMul`] without transposes, broadcast or bias, and alpha 1.
    pub fn batched_matmul(batch: u32, m: u32, n: u32, k: u32) -> Op {
        Op::MatMul {
            batch,
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            broadcast_b: false,
            bias: false,
            alpha: 1.0,
            weight_format: WeightFormat::F32,
        }
    }

    /// Short name, for traces and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Op::MatMul { .. } => "matmul",
            Op::Add { .. } => "add",
            Op::Mul { .. } => "mul",
            Op::Scale { .. } => "scale",
            Op::Gelu { .. } => "gelu",
            Op::Relu { .. } => "relu",
            Op::LayerNorm { .. } => "layernorm",
            Op::Softmax { .. } => "softmax",
            Op::Embedding { .. } => "embedding",
            Op::MeanPool { .. } => "meanpool",
            Op::L2Normalize { .. } => "l2normalize",
            Op::Conv2d { .. } => "conv2d",
            Op::MaxPool2d { .. } => "maxpool2d",
            Op::Permute { .. } => "permute",
            Op::Copy { .. } => "copy",
            Op::RmsNorm { .. } => "rmsnorm",
            Op::Rope { .. } => "rope",
            Op::SiluMul { .. } => "silu_mul",
            Op::KvWrite { .. } => "kv_write",
            Op::PagedAttention { .. } => "paged_attention",
        }
    }

    /// Whether the op reads its output's bytes and changes only some of them ([`Op::KvWrite`]):
    /// a backend binds the output's current bytes, never a fresh buffer.
    pub fn updates_output(&self) -> bool {
        matches!(self, Op::KvWrite { .. })
    }

    /// Output height and width of [`Op::Conv2d`] and [`Op::MaxPool2d`].
    ///
    /// # Errors
    /// [`ArgumentError`](crate::ArgumentError) when the window does not fit the (padded) input, a
    /// side or the stride is zero, or for other ops;
    /// [`Error::ArithmeticOverflow`] when an output side does not fit in `u32` (never truncated).
    pub fn conv_out(&self) -> Result<(u32, u32)> {
        let (h, w, kh, kw, stride, pad) = match *self {
            Op::Conv2d {
                h,
                w,
                kh,
                kw,
                stride,
                pad,
                ..
            } => (h, w, kh, kw, stride, pad),
            Op::MaxPool2d {
                h, w, k, stride, ..
            } => (h, w, k, k, stride, 0),
            _ => {
                return Err(crate::ArgumentError::invalid_value(
                    "op for a spatial output",
                    self.name(),
                    "conv2d or max_pool2d",
                )
                .into());
            }
        };
        if stride == 0 || kh == 0 || kw == 0 {
            let what = format!("{} stride or window side", self.name());
            return Err(crate::ArgumentError::zero(what).into());
        }
        let ph = u64::from(h) + 2 * u64::from(pad);
        let pw = u64::from(w) + 2 * u64::from(pad);
        if u64::from(kh) > ph || u64::from(kw) > pw {
            return Err(crate::ArgumentError::invalid_value(
                format!("{} window", self.name()),
                format!("{kh}x{kw}"),
                format!("at most the padded input's {ph}x{pw}"),
            )
            .into());
        }
        let side = |padded: u64, k: u32, axis: &str| {
            let out = (padded - u64::from(k)) / u64::from(stride) + 1;
            u32::try_from(out).map_err(|_| Error::ArithmeticOverflow {
                what: format!("{} output {axis} {out}", self.name()),
                limit_name: "u32",
            })
        };
        Ok((side(ph, kh, "height")?, side(pw, kw, "width")?))
    }

    /// Output shape of [`Op::Permute`].
    pub fn permuted_dims(dims: [u32; 4], perm: [u8; 4]) -> [u32; 4] {
        [0, 1, 2, 3].map(|i| dims[usize::from(perm[i] & 3)])
    }
}

/// The product of `dims`, or `None` when it overflows `u64`.
pub fn checked_product(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests;
