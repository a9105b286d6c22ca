//! The standard op set, defined once as data.
//!
//! Each backend dispatches an [`Op`] over [`BlockRange`](crate::backend::BlockRange) bindings: the
//! op's inputs, then its outputs, in the order [`Op::signature`] lists them. The host
//! implementations (`ops::host`) are the numerical reference every backend is checked against;
//! the WGSL sources (`ops::wgsl`) serve wgpu directly and Vulkan through naga.
//!
//! Shapes are element counts in `u32` (kernels index with 32-bit integers); every tensor is
//! contiguous, row-major. Reshapes are free (a tensor's bytes do not move); transposes and
//! permutations are explicit [`Op::Permute`] copies.

use crate::{Error, Result};

pub mod host;
mod operand;
pub mod quant;
#[cfg(any(test, feature = "test-support"))]
pub mod samples;
pub mod wgsl;

pub use operand::{DType, Operand, Signature};
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
    /// `y = x` over `len` elements of 4 bytes (any 32-bit dtype).
    Copy {
        /// Elements.
        len: u32,
    },
}

impl Op {
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
        }
    }

    /// Checks the parameters and returns the operands in binding order.
    ///
    /// Every size is computed with checked arithmetic: an element count that does not fit the
    /// kernels' 32-bit index is refused, never wrapped or truncated.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero dimension, a `b_len` that does not divide `len`, a
    /// permutation that is not one, or a convolution window larger than its padded input;
    /// [`Error::ArithmeticOverflow`] for an element count past `u64` or a spatial output size past
    /// `u32`; [`Error::TooLarge`] for an operand of more than `u32::MAX` elements.
    pub fn signature(&self) -> Result<Signature> {
        let nz = |name: &str, v: u32| {
            if v == 0 {
                Err(Error::invalid(format!(
                    "{}: dimension {name} is zero",
                    self.name()
                )))
            } else {
                Ok(u64::from(v))
            }
        };
        // An operand of `dims` elements (product checked, at most u32::MAX: kernels index with u32).
        let f = |what: &str, dims: &[u64]| self.operand(DType::F32, what, dims);
        let sig = |inputs: Vec<Operand>, outputs: Vec<Operand>| Signature { inputs, outputs };
        Ok(match *self {
            Op::MatMul {
                batch,
                m,
                n,
                k,
                broadcast_b,
                bias,
                weight_format,
                ..
            } => {
                let (batch, m, n, k) = (nz("batch", batch)?, nz("m", m)?, nz("n", n)?, nz("k", k)?);
                let b_batch = if broadcast_b { 1 } else { batch };
                let mut inputs = vec![f("a", &[batch, m, k])?];
                self.push_weight(&mut inputs, weight_format, "b", [b_batch * n, k])?;
                if bias {
                    inputs.push(f("bias", &[n])?);
                }
                sig(inputs, vec![f("c", &[batch, m, n])?])
            }
            Op::Add { len, b_len } | Op::Mul { len, b_len } => {
                let (len, b_len) = (nz("len", len)?, nz("b_len", b_len)?);
                if len % b_len != 0 {
                    return Err(Error::invalid(format!(
                        "{}: b_len {b_len} does not divide len {len}",
                        self.name()
                    )));
                }
                sig(
                    vec![f("a", &[len])?, f("b", &[b_len])?],
                    vec![f("c", &[len])?],
                )
            }
            Op::Scale { len, .. } | Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } => {
                let len = nz("len", len)?;
                sig(vec![f("x", &[len])?], vec![f("y", &[len])?])
            }
            Op::LayerNorm { rows, cols, .. } => {
                let (rows, cols) = (nz("rows", rows)?, nz("cols", cols)?);
                sig(
                    vec![
                        f("x", &[rows, cols])?,
                        f("gamma", &[cols])?,
                        f("beta", &[cols])?,
                    ],
                    vec![f("y", &[rows, cols])?],
                )
            }
            Op::Softmax {
                rows,
                cols,
                masked,
                rows_per_mask,
            } => {
                let (rows, cols) = (nz("rows", rows)?, nz("cols", cols)?);
                let mut inputs = vec![f("x", &[rows, cols])?];
                if masked {
                    let per = nz("rows_per_mask", rows_per_mask)?;
                    if rows % per != 0 {
                        return Err(Error::invalid(format!(
                            "softmax: rows_per_mask {per} does not divide rows {rows}"
                        )));
                    }
                    inputs.push(f("mask", &[rows / per, cols])?);
                }
                sig(inputs, vec![f("y", &[rows, cols])?])
            }
            Op::Embedding {
                vocab,
                dim,
                rows,
                weight_format,
            } => {
                let (vocab, dim, rows) = (nz("vocab", vocab)?, nz("dim", dim)?, nz("rows", rows)?);
                let mut inputs = Vec::with_capacity(3);
                self.push_weight(&mut inputs, weight_format, "table", [vocab, dim])?;
                inputs.push(self.operand(DType::U32, "ids", &[rows])?);
                sig(inputs, vec![f("y", &[rows, dim])?])
            }
            Op::MeanPool { batch, seq, dim } => {
                let (batch, seq, dim) = (nz("batch", batch)?, nz("seq", seq)?, nz("dim", dim)?);
                sig(
                    vec![f("x", &[batch, seq, dim])?, f("mask", &[batch, seq])?],
                    vec![f("y", &[batch, dim])?],
                )
            }
            Op::L2Normalize { rows, cols, .. } => {
                let (rows, cols) = (nz("rows", rows)?, nz("cols", cols)?);
                sig(vec![f("x", &[rows, cols])?], vec![f("y", &[rows, cols])?])
            }
            Op::Conv2d {
                n,
                c_in,
                h,
                w,
                c_out,
                kh,
                kw,
                bias,
                weight_format,
                ..
            } => {
                let (n, c_in, c_out) = (nz("n", n)?, nz("c_in", c_in)?, nz("c_out", c_out)?);
                let (h, w) = (nz("h", h)?, nz("w", w)?);
                let (oh, ow) = self.conv_out()?;
                let (oh, ow) = (u64::from(oh), u64::from(ow));
                let mut inputs = vec![f("x", &[n, c_in, h, w])?];
                let inner =
                    checked_product(&[c_in, nz("kh", kh)?, nz("kw", kw)?]).ok_or_else(|| {
                        Error::ArithmeticOverflow {
                            what: "conv2d weight row c_in·kh·kw".into(),
                            limit_name: "u64",
                        }
                    })?;
                self.push_weight(&mut inputs, weight_format, "weight", [c_out, inner])?;
                if bias {
                    inputs.push(f("bias", &[c_out])?);
                }
                sig(inputs, vec![f("y", &[n, c_out, oh, ow])?])
            }
            Op::MaxPool2d { n, c, h, w, .. } => {
                let (n, c) = (nz("n", n)?, nz("c", c)?);
                let (oh, ow) = self.conv_out()?;
                let (oh, ow) = (u64::from(oh), u64::from(ow));
                sig(
                    vec![f("x", &[n, c, nz("h", h)?, nz("w", w)?])?],
                    vec![f("y", &[n, c, oh, ow])?],
                )
            }
            Op::Permute { dims, perm } => {
                let mut seen = [false; 4];
                for &p in &perm {
                    if p > 3 || seen[p as usize] {
                        return Err(Error::invalid(format!(
                            "permute: {perm:?} is not a permutation of 0..4"
                        )));
                    }
                    seen[p as usize] = true;
                }
                let mut d = [0u64; 4];
                for (i, v) in dims.iter().enumerate() {
                    d[i] = nz(["d0", "d1", "d2", "d3"][i], *v)?;
                }
                sig(vec![f("x", &d)?], vec![f("y", &d)?])
            }
        })
    }

    /// An operand of `dims` elements of `dtype`, the product checked and at most `u32::MAX`.
    ///
    /// # Errors
    /// [`Error::ArithmeticOverflow`] when the product overflows `u64`; [`Error::TooLarge`] past
    /// `u32::MAX` elements (kernels index in u32: hopeless on every backend).
    fn operand(&self, dtype: DType, what: &str, dims: &[u64]) -> Result<Operand> {
        let len = checked_product(dims).ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("{} operand `{what}` element count {dims:?}", self.name()),
            limit_name: "u64",
        })?;
        if len > u64::from(u32::MAX) {
            return Err(Error::TooLarge {
                what: "kernel operand",
                requested: len.saturating_mul(dtype.size()),
                limit: u64::from(u32::MAX) * dtype.size(),
                limit_name: "2^32 - 1 elements (kernels index in u32)",
            });
        }
        Ok(Operand { dtype, len })
    }

    /// Pushes a weight operand of `channels · inner` elements stored in `format`, then its scales
    /// `[channels, groups]` when the format has them (the products are of validated dimensions;
    /// [`Op::operand`] checks them against the kernels' range).
    ///
    /// # Errors
    /// As [`Op::operand`].
    fn push_weight(
        &self,
        inputs: &mut Vec<Operand>,
        format: WeightFormat,
        what: &str,
        [channels, inner]: [u64; 2],
    ) -> Result<()> {
        inputs.push(self.operand(format.dtype(), what, &[channels, inner])?);
        if format.has_scales() {
            let (_, groups) = format.groups(inner);
            inputs.push(self.operand(DType::F32, "scales", &[channels, groups])?);
        }
        Ok(())
    }

    /// The format of the op's weight operand (f32 for ops without one).
    pub fn weight_format(&self) -> WeightFormat {
        match *self {
            Op::MatMul { weight_format, .. }
            | Op::Conv2d { weight_format, .. }
            | Op::Embedding { weight_format, .. } => weight_format,
            _ => WeightFormat::F32,
        }
    }

    /// Names of the operands in binding order (inputs, then outputs), for error messages.
    /// The list matches [`Op::signature`] (optional inputs appear only when present).
    pub fn operand_names(&self) -> Vec<&'static str> {
        let scales = self.weight_format().has_scales();
        let mut names = match *self {
            Op::MatMul { bias, .. } => {
                if bias {
                    vec!["a", "b", "bias", "c"]
                } else {
                    vec!["a", "b", "c"]
                }
            }
            Op::Add { .. } | Op::Mul { .. } => vec!["a", "b", "c"],
            Op::Scale { .. }
            | Op::Gelu { .. }
            | Op::Relu { .. }
            | Op::L2Normalize { .. }
            | Op::MaxPool2d { .. }
            | Op::Permute { .. }
            | Op::Copy { .. } => vec!["x", "y"],
            Op::LayerNorm { .. } => vec!["x", "gamma", "beta", "y"],
            Op::Softmax { masked, .. } => {
                if masked {
                    vec!["x", "mask", "y"]
                } else {
                    vec!["x", "y"]
                }
            }
            Op::Embedding { .. } => vec!["table", "ids", "y"],
            Op::MeanPool { .. } => vec!["x", "mask", "y"],
            Op::Conv2d { bias, .. } => {
                if bias {
                    vec!["x", "weight", "bias", "y"]
                } else {
                    vec!["x", "weight", "y"]
                }
            }
        };
        if scales {
            // Right after the weight: operand 1 of matmul and conv2d, 0 of embedding.
            let at = if matches!(self, Op::Embedding { .. }) {
                1
            } else {
                2
            };
            names.insert(at, "scales");
        }
        names
    }

    /// Checks a dispatch's binding sizes (inputs then outputs, in bytes) against the signature and
    /// returns the signature. The rule is exact: a binding larger than its operand is refused like
    /// a smaller one, so no backend trims, pads or reads past an operand. The validating front and
    /// the host reference use this, so a bad binding gets the same error everywhere.
    ///
    /// # Errors
    /// As [`Op::signature`]; [`Error::BindingCount`] for a wrong number of bindings;
    /// [`Error::BindingSize`] naming the first operand whose size is wrong.
    pub fn check_binding_sizes(&self, sizes: &[u64]) -> Result<Signature> {
        let sig = self.signature()?;
        let operands = sig.inputs.iter().chain(&sig.outputs);
        let count = sig.inputs.len() + sig.outputs.len();
        if sizes.len() != count {
            return Err(Error::BindingCount {
                op: self.name(),
                expected: count,
                actual: sizes.len(),
                operands: self.operand_names().join(", "),
            });
        }
        for (index, ((operand, &size), name)) in
            operands.zip(sizes).zip(self.operand_names()).enumerate()
        {
            if operand.size() != size {
                return Err(Error::BindingSize {
                    op: self.name(),
                    operand: name,
                    index,
                    expected: operand.size(),
                    actual: size,
                });
            }
        }
        Ok(sig)
    }

    /// Output height and width of [`Op::Conv2d`] and [`Op::MaxPool2d`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the window does not fit the (padded) input, or for other ops;
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
                return Err(Error::invalid(format!(
                    "{} has no spatial output",
                    self.name()
                )));
            }
        };
        if stride == 0 || kh == 0 || kw == 0 {
            return Err(Error::invalid(format!(
                "{}: stride and window must be non-zero",
                self.name()
            )));
        }
        let ph = u64::from(h) + 2 * u64::from(pad);
        let pw = u64::from(w) + 2 * u64::from(pad);
        if u64::from(kh) > ph || u64::from(kw) > pw {
            return Err(Error::invalid(format!(
                "{}: window {kh}x{kw} larger than padded input {ph}x{pw}",
                self.name()
            )));
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
