//! The operands of each op: [`Op::signature`] (shapes and dtypes in binding order, every size
//! checked), their names, and the exact binding-size rule every backend applies.

use crate::ops::{DType, KvLayout, Op, Operand, Signature, WeightFormat, checked_product};
use crate::{ArgumentError, Error, Result};

impl Op {
    /// Checks the parameters and returns the operands in binding order.
    ///
    /// Every size is computed with checked arithmetic: an element count that does not fit the
    /// kernels' 32-bit index is refused, never wrapped or truncated.
    ///
    /// # Errors
    /// [`ArgumentError`]: [`Zero`](ArgumentError::Zero) for a zero dimension,
    /// [`NotMultiple`](ArgumentError::NotMultiple) for a `b_len` that does not divide `len` (and
    /// the like), [`Invalid`](ArgumentError::Invalid) for a permutation that is not one or a
    /// convolution window larger than its padded input;
    /// [`Error::ArithmeticOverflow`] for an element count past `u64` or a spatial output size past
    /// `u32`; [`Error::TooLarge`] for an operand of more than `u32::MAX` elements.
    pub fn signature(&self) -> Result<Signature> {
        let nz = |name: &str, v: u32| {
            if v == 0 {
                Err(Error::from(ArgumentError::zero(format!(
                    "{} dimension {name}",
                    self.name()
                ))))
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
                    let what = format!("{} len", self.name());
                    return Err(ArgumentError::not_multiple(what, len, "b_len", b_len).into());
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
                        let e =
                            ArgumentError::not_multiple("softmax rows", rows, "rows_per_mask", per);
                        return Err(e.into());
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
            Op::RmsNorm { rows, cols, .. } => {
                let (rows, cols) = (nz("rows", rows)?, nz("cols", cols)?);
                sig(
                    vec![f("x", &[rows, cols])?, f("weight", &[cols])?],
                    vec![f("y", &[rows, cols])?],
                )
            }
            Op::Rope {
                tokens,
                heads,
                head_dim,
                ..
            } => {
                let (tokens, heads) = (nz("tokens", tokens)?, nz("heads", heads)?);
                let d = nz("head_dim", head_dim)?;
                if d % 2 != 0 {
                    return Err(ArgumentError::not_multiple("rope head_dim", d, "two", 2).into());
                }
                let u = |what: &str, dims: &[u64]| self.operand(DType::U32, what, dims);
                sig(
                    vec![f("x", &[tokens, heads * d])?, u("positions", &[tokens])?],
                    vec![f("y", &[tokens, heads * d])?],
                )
            }
            Op::SiluMul { len } => {
                let len = nz("len", len)?;
                sig(
                    vec![f("gate", &[len])?, f("up", &[len])?],
                    vec![f("y", &[len])?],
                )
            }
            Op::KvWrite {
                kv,
                blocks,
                stride,
                layer,
                tokens,
            } => {
                let segment = self.kv_segment(kv, blocks, stride, layer)?;
                let tokens = nz("tokens", tokens)?;
                let row = u64::from(kv.kv_heads) * u64::from(kv.head_dim);
                let u = |what: &str, dims: &[u64]| self.operand(DType::U32, what, dims);
                sig(
                    vec![
                        f("k", &[tokens, row])?,
                        f("v", &[tokens, row])?,
                        u("slots", &[tokens])?,
                    ],
                    vec![segment],
                )
            }
            Op::PagedAttention {
                kv,
                blocks,
                stride,
                layer,
                tokens,
                q_heads,
                rows,
                width,
                carry_in,
                carry_out,
                ..
            } => {
                let segment = self.kv_segment(kv, blocks, stride, layer)?;
                let (tokens, heads) = (nz("tokens", tokens)?, nz("q_heads", q_heads)?);
                if !heads.is_multiple_of(u64::from(kv.kv_heads)) {
                    let what = "paged_attention query heads";
                    let kv_heads = u64::from(kv.kv_heads);
                    return Err(
                        ArgumentError::not_multiple(what, heads, "KV heads", kv_heads).into(),
                    );
                }
                let d = u64::from(kv.head_dim);
                let u = |what: &str, dims: &[u64]| self.operand(DType::U32, what, dims);
                let mut inputs = vec![
                    f("q", &[tokens, heads * d])?,
                    segment,
                    u("tables", &[nz("rows", rows)?, nz("width", width)?])?,
                    u("meta", &[tokens, 2])?,
                ];
                let state = f("carry", &[tokens, heads, d + 2])?;
                if carry_in {
                    inputs.push(state);
                }
                let out = if carry_out {
                    state
                } else {
                    f("y", &[tokens, heads * d])?
                };
                sig(inputs, vec![out])
            }
            Op::Permute { dims, perm } => {
                let mut seen = [false; 4];
                for &p in &perm {
                    if p > 3 || seen[p as usize] {
                        let e = ArgumentError::invalid_value(
                            "permute axes",
                            format!("{perm:?}"),
                            "a permutation of 0..4",
                        );
                        return Err(e.into());
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

    /// The KV segment operand of [`Op::KvWrite`] and [`Op::PagedAttention`]: `blocks · stride`
    /// bytes, after checking the layout, the stride and the layer.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`] for a zero dimension or a stride that is not a multiple of 4 or
    /// is smaller than a block, [`ArgumentError::OutOfRange`] for a layer past the layout's; as
    /// [`Op::operand`].
    fn kv_segment(&self, kv: KvLayout, blocks: u32, stride: u32, layer: u32) -> Result<Operand> {
        let name = self.name();
        if kv.layers == 0
            || kv.kv_heads == 0
            || kv.head_dim == 0
            || kv.block_tokens == 0
            || blocks == 0
        {
            return Err(ArgumentError::invalid_value(
                format!("{name} KV layout and block count"),
                format!("{kv:?} with {blocks} blocks"),
                "every dimension and the block count at least 1",
            )
            .into());
        }
        if layer >= kv.layers {
            let what = format!("{name} layer");
            return Err(ArgumentError::out_of_range(what, layer.into(), kv.layers.into()).into());
        }
        if !stride.is_multiple_of(4) || u64::from(stride) < kv.block_bytes() {
            return Err(ArgumentError::invalid_value(
                format!("{name} segment stride"),
                stride.to_string(),
                format!(
                    "a multiple of 4 of at least the block's {} bytes",
                    kv.block_bytes()
                ),
            )
            .into());
        }
        self.operand(
            DType::U8,
            "segment",
            &[u64::from(blocks), u64::from(stride)],
        )
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
        format.check_product(self, inner)?;
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
            Op::RmsNorm { .. } => vec!["x", "weight", "y"],
            Op::Rope { .. } => vec!["x", "positions", "y"],
            Op::SiluMul { .. } => vec!["gate", "up", "y"],
            Op::KvWrite { .. } => vec!["k", "v", "slots", "segment"],
            Op::PagedAttention {
                carry_in,
                carry_out,
                ..
            } => {
                let mut names = vec!["q", "segment", "tables", "meta"];
                if carry_in {
                    names.push("carry");
                }
                names.push(if carry_out { "carry" } else { "y" });
                names
            }
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

    /// Checks the numbers of input and output bindings against the signature and returns it.
    ///
    /// # Errors
    /// As [`Op::signature`]; [`Error::BindingCount`] when either number differs.
    pub fn check_binding_count(&self, inputs: usize, outputs: usize) -> Result<Signature> {
        let sig = self.signature()?;
        if inputs != sig.inputs.len() || outputs != sig.outputs.len() {
            let expected = sig.inputs.len() + sig.outputs.len();
            return Err(self.binding_count(expected, inputs + outputs));
        }
        Ok(sig)
    }

    /// The [`Error::BindingCount`] of `actual` bindings where the op takes `expected`, naming its
    /// operands.
    pub fn binding_count(&self, expected: usize, actual: usize) -> Error {
        Error::BindingCount {
            op: self.name(),
            expected,
            actual,
            operands: self.operand_names().join(", "),
        }
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
        let operands = sig.operands();
        let count = sig.inputs.len() + sig.outputs.len();
        if sizes.len() != count {
            return Err(self.binding_count(count, sizes.len()));
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
}
