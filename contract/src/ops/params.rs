//! The scalar parameters of an op's GPU kernels, marshalled once for both kernel paths: CUDA
//! passes them as kernel arguments after the operand pointers (`kernels.cu` declares them in
//! this order) and WGSL writes them, as bits, into the first words of its 16-word uniform block
//! ([`crate::ops::wgsl`]). Each path then appends only what is its own: a launch-geometry value
//! (WGSL's tile and element counts, a KV write's invocation grouping) that the other computes
//! from its own grid.
//!
//! The list per op is its shape fields in declaration order, booleans as 0 or 1, with
//! `rows_per_mask` at least 1, the weight's `fmt, group, groups` last for the ops that read one
//! (`fmt`: 0 f32, 1 f16, 2 int8 of either kind), and derived sizes where a kernel needs them:
//! conv2d and max-pooling's output `oh, ow`; permute's element count, output dims 1–3 and the
//! input stride of each output axis; a KV op's cache layout ([`KvLayout::kernel_params`]) first
//! and paged attention's scales offset last.
//!
//! The host backend reads the typed op instead: its kernels take typed values and slices, so a
//! flat list would only drop the types.

use crate::ops::{KvLayout, Op, WeightFormat};
use crate::{Error, Result};

/// One scalar kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `u32` (`unsigned int`).
    U32(u32),
    /// `f32` (`float`).
    F32(f32),
}

impl Scalar {
    /// The value's 32 bits, as a uniform word holds it.
    pub fn bits(self) -> u32 {
        match self {
            Scalar::U32(v) => v,
            Scalar::F32(v) => v.to_bits(),
        }
    }
}

impl Op {
    /// The op's kernel parameters (module doc).
    ///
    /// # Errors
    /// As [`Op::conv_out`] for conv2d and max-pooling; [`Error::ArithmeticOverflow`] for a
    /// permute whose element count or strides exceed `u32`.
    pub fn kernel_scalars(&self) -> Result<Vec<Scalar>> {
        use Scalar::{F32 as F, U32 as U};
        let flag = |v: bool| U(u32::from(v));
        Ok(match *self {
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
                weight_format,
            } => {
                let mut v = vec![U(batch), U(m), U(n), U(k), flag(trans_a), flag(trans_b)];
                v.extend([flag(broadcast_b), flag(bias), F(alpha)]);
                v.extend(weight_scalars(weight_format, u64::from(k)));
                v
            }
            Op::Add { len, b_len } | Op::Mul { len, b_len } => vec![U(len), U(b_len)],
            Op::Scale { len, alpha } => vec![U(len), F(alpha)],
            Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } | Op::SiluMul { len } => {
                vec![U(len)]
            }
            Op::LayerNorm { rows, cols, eps }
            | Op::L2Normalize { rows, cols, eps }
            | Op::RmsNorm { rows, cols, eps } => vec![U(rows), U(cols), F(eps)],
            Op::Softmax {
                rows,
                cols,
                masked,
                rows_per_mask,
            } => vec![U(rows), U(cols), flag(masked), U(rows_per_mask.max(1))],
            Op::Embedding {
                vocab,
                dim,
                rows,
                weight_format,
            } => {
                let mut v = vec![U(vocab), U(dim), U(rows)];
                v.extend(weight_scalars(weight_format, u64::from(dim)));
                v
            }
            Op::MeanPool { batch, seq, dim } => vec![U(batch), U(seq), U(dim)],
            Op::Conv2d {
                c_in,
                kh,
                kw,
                bias,
                weight_format,
                ..
            } => {
                let (oh, ow) = self.conv_out()?;
                let inner = u64::from(c_in) * u64::from(kh) * u64::from(kw);
                let mut v: Vec<Scalar> = self.conv2d_dims().into_iter().flatten().map(U).collect();
                v.extend([flag(bias), U(oh), U(ow)]);
                v.extend(weight_scalars(weight_format, inner));
                v
            }
            Op::MaxPool2d {
                n,
                c,
                h,
                w,
                k,
                stride,
            } => {
                let (oh, ow) = self.conv_out()?;
                [n, c, h, w, k, stride, oh, ow].map(U).to_vec()
            }
            Op::Permute { dims, perm } => {
                let len = dims.iter().map(|&d| u64::from(d)).product();
                let od = Op::permuted_dims(dims, perm);
                let mut v = vec![U(self.kernel_u32("len", len)?)];
                v.extend(od[1..].iter().map(|&d| U(d)));
                for stride in permute_strides(dims, perm) {
                    v.push(U(self.kernel_u32("stride", stride)?));
                }
                v
            }
            Op::Rope {
                tokens,
                heads,
                head_dim,
                theta,
            } => vec![U(tokens), U(heads), U(head_dim), F(theta)],
            Op::KvWrite {
                kv,
                blocks,
                stride,
                layer,
                tokens,
            } => {
                let mut v = kv_layout(&kv, blocks, stride);
                v.extend([U(layer), U(tokens)]);
                v
            }
            Op::PagedAttention {
                kv,
                blocks,
                stride,
                first_block,
                layer,
                tokens,
                q_heads,
                rows,
                width,
                scale,
                carry_in,
                carry_out,
            } => {
                let mut v = kv_layout(&kv, blocks, stride);
                v.extend([first_block, layer, tokens, q_heads, rows, width].map(U));
                v.extend([F(scale), flag(carry_in), flag(carry_out)]);
                v.push(U(kv.kernel_scales_at()));
                v
            }
        })
    }

    /// `v` as a kernel's `u32` parameter `what`.
    fn kernel_u32(&self, what: &str, v: u64) -> Result<u32> {
        u32::try_from(v).map_err(|_| Error::ArithmeticOverflow {
            what: format!("{}: {what} {v}", self.name()),
            limit_name: "the kernels' u32 element index",
        })
    }
}

/// The `fmt, group, groups` of a weight stored in `format` over rows of `inner` elements.
fn weight_scalars(format: WeightFormat, inner: u64) -> [Scalar; 3] {
    let fmt = match format {
        WeightFormat::F32 => 0,
        WeightFormat::F16 => 1,
        WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => 2,
    };
    // Group sizes are at most the row length, a checked u32 operand dimension.
    let (group, groups) = format.groups(inner.max(1));
    [fmt, group as u32, groups as u32].map(Scalar::U32)
}

/// A KV op's cache layout parameters.
fn kv_layout(kv: &KvLayout, blocks: u32, stride: u32) -> Vec<Scalar> {
    kv.kernel_params(blocks, stride).map(Scalar::U32).to_vec()
}

/// For output axis `i` of a permute, the input stride (in elements) of input axis `perm[i]`;
/// input strides are row-major over `dims`.
pub fn permute_strides(dims: [u32; 4], perm: [u8; 4]) -> [u64; 4] {
    let d = dims.map(u64::from);
    let in_stride = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
    perm.map(|p| in_stride[usize::from(p & 3)])
}
