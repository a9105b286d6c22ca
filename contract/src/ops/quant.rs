//! Weight formats: how the weight operand of [`Op::MatMul`] (`b`),
//! [`Op::Conv2d`] (`weight`) and [`Op::Embedding`]
//! (`table`) is stored, and the host conversions to and from it.
//!
//! Weights are most of an inference model's memory; storing them in fewer bits and dequantising
//! in the kernel as they are loaded (never a full-precision copy on the device) is the standard
//! way to cut it. Three formats besides f32:
//!
//! * **f16**: IEEE binary16, two per 32-bit word (element `e` in the low half of word `e / 2`
//!   when `e` is even). Half the bytes; relative error ≤ 2⁻¹¹ in the normal range. WGSL reads it
//!   with `unpack2x16float`, so no `shader-f16` feature is needed.
//! * **int8**: symmetric, `w ≈ q · scale` with `q` in `[-127, 127]` (−128 is never produced, so
//!   the range is symmetric) and one f32 `scale = max|w| / 127` per *output channel*, or per
//!   `group` consecutive inner elements of a channel. Four per 32-bit word, flat over the tensor
//!   (element `e` is byte `e % 4` of word `e / 4`, little-endian), so a row of odd length
//!   straddles words and a tensor is padded to whole words. A quarter of the bytes plus the scales.
//!
//! * **int8, dynamic** ([`WeightFormat::Int8Dynamic`]): stored exactly as int8, but a matmul
//!   also quantises its `A` operand, a row at a time as it runs, and sums products of integers
//!   (W8A8, as ONNX Runtime's dynamic quantisation): row `i` of op(A) spans `[lo, hi]` (its
//!   minimum and maximum, widened to include 0); `inv = 255 / (hi − lo)`, `s = (hi − lo) / 255`,
//!   zero point `z = round(−lo · inv)` and `u = clamp(round(a · inv) + z, 0, 255)`, rounding
//!   ties to even (all 0 for an all-zero row; the row's outputs are NaN when `hi − lo` is not
//!   finite). Per group `g` of column `j`, `d = Σ (u − z) · w` in 32-bit integers (exact: a group
//!   holds at most [`MAX_DYNAMIC_GROUP`] elements), and `C[i][j] = alpha · (s · Σ_g
//!   scale[j][g] · d_g) + bias[j]`, the groups summed in order. Integer multiply-adds run
//!   several times faster than f32 on CPUs (x86's VNNI, Arm's dot-product instructions); the
//!   cost is `A`'s rounding, half a step of `(hi − lo) / 255` per element (asymmetric, so a
//!   row of mostly one sign, as after GELU, keeps twice a symmetric range's resolution). Conv2d
//!   refuses it; an embedding, which multiplies nothing, reads it as int8.
//!
//! Channels and inner elements, per op (the scales operand is `[channels, groups]`, row-major):
//!
//! | op | channel | inner elements (grouped) |
//! |---|---|---|
//! | matmul `b` | output column `j` (of each `b` matrix: `b_batch · n` channels) | `k` |
//! | conv2d `weight` `[c_out, c_in, kh, kw]` | `c_out` | `c_in · kh · kw` |
//! | embedding `table` `[vocab, dim]` | row | `dim` |
//!
//! Per-channel scales are the usual choice for weights (PyTorch's `per_channel_symmetric`, ONNX
//! Runtime's `QuantizeLinear` with an axis); per-group scales (as GPTQ/AWQ style block
//! quantisation) follow outliers more closely at the cost of more scales.

use crate::ops::{DType, Op};
use crate::{ArgumentError, Error, Result};

mod half;

pub use half::{decode_halves, f16_to_f32, f32_to_f16};

impl Op {
    /// This op with its weight stored in `format` (an op without a weight operand is returned
    /// unchanged).
    pub fn with_weight_format(&self, format: WeightFormat) -> Op {
        let mut op = self.clone();
        if let Op::MatMul { weight_format, .. }
        | Op::Conv2d { weight_format, .. }
        | Op::Embedding { weight_format, .. } = &mut op
        {
            *weight_format = format;
        }
        op
    }

    /// This op again with each stored weight format it accepts: f16, int8 and int8-dynamic with
    /// scale groups of `group` elements (0: one per channel), each kept when its signature is
    /// valid (a convolution refuses int8-dynamic). Empty for an op without a weight operand.
    pub fn quantised_variants(&self, group: u32) -> Vec<Op> {
        if !matches!(
            self,
            Op::MatMul { .. } | Op::Conv2d { .. } | Op::Embedding { .. }
        ) {
            return Vec::new();
        }
        [
            WeightFormat::F16,
            WeightFormat::Int8 { group },
            WeightFormat::Int8Dynamic { group },
        ]
        .into_iter()
        .map(|format| self.with_weight_format(format))
        .filter(|op| op.signature().is_ok())
        .collect()
    }
}

/// How a weight operand is stored (module doc).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// 32-bit floats (the default).
    #[default]
    F32,
    /// IEEE half floats, two per 32-bit word.
    F16,
    /// Symmetric int8, four per 32-bit word, with an f32 scale operand after the weight.
    Int8 {
        /// Inner elements per scale; 0 (or at least the inner length) means one scale per channel.
        group: u32,
    },
    /// Stored as [`WeightFormat::Int8`]; a matmul also quantises `A` per row and sums integer
    /// products (module doc).
    Int8Dynamic {
        /// Inner elements per scale, as [`WeightFormat::Int8`]'s.
        group: u32,
    },
}

/// The most inner elements one scale group of an [`WeightFormat::Int8Dynamic`] matmul sums:
/// `255 · 128 · MAX_DYNAMIC_GROUP` stays below 2³¹, so the integer sums are exact in 32 bits
/// for any stored byte (−128 included).
pub const MAX_DYNAMIC_GROUP: u64 = (i32::MAX as u64) / (255 * 128);

impl WeightFormat {
    /// The element type of the weight operand.
    pub fn dtype(self) -> DType {
        match self {
            WeightFormat::F32 => DType::F32,
            WeightFormat::F16 => DType::F16,
            WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => DType::I8,
        }
    }

    /// Short name: "f32", "f16", "int8", "int8-dynamic".
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
            WeightFormat::Int8 { .. } => "int8",
            WeightFormat::Int8Dynamic { .. } => "int8-dynamic",
        }
    }

    /// How the weight's bytes and scales are laid out: this format, with
    /// [`WeightFormat::Int8Dynamic`] as the [`WeightFormat::Int8`] it is stored as.
    pub fn storage(self) -> WeightFormat {
        match self {
            WeightFormat::Int8Dynamic { group } => WeightFormat::Int8 { group },
            other => other,
        }
    }

    /// `Ok` when `op`, whose weight rows hold `inner` elements, computes in this format: an
    /// int8-dynamic conv2d, or a matmul group longer than [`MAX_DYNAMIC_GROUP`], is refused.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`] for conv2d, [`ArgumentError::TooMany`] for the group.
    pub(crate) fn check_product(self, op: &Op, inner: u64) -> Result<()> {
        if !matches!(self, WeightFormat::Int8Dynamic { .. }) {
            return Ok(());
        }
        let (group, _) = self.groups(inner.max(1));
        match op {
            Op::Conv2d { .. } => {
                let expected = "f32, f16 or int8 (conv2d quantises no activations)";
                let what = "conv2d weight format";
                Err(ArgumentError::invalid_value(what, self.name(), expected).into())
            }
            Op::MatMul { .. } if group > MAX_DYNAMIC_GROUP => {
                let what = "int8-dynamic matmul: inner elements per scale group";
                Err(ArgumentError::too_many(what, group, MAX_DYNAMIC_GROUP).into())
            }
            _ => Ok(()),
        }
    }

    /// Whether a scales operand follows the weight.
    pub fn has_scales(self) -> bool {
        matches!(self.storage(), WeightFormat::Int8 { .. })
    }

    /// `(group, groups)` for rows of `inner` elements: the effective group size (the whole row for
    /// per-channel scales) and the number of scales per channel. `inner` is at least 1.
    pub fn groups(self, inner: u64) -> (u64, u64) {
        match self.storage() {
            WeightFormat::Int8 { group } if group > 0 && u64::from(group) < inner => {
                let g = u64::from(group);
                (g, inner.div_ceil(g))
            }
            _ => (inner, 1),
        }
    }
}

/// A weight converted to a stored format: the bytes of the weight operand (padded to whole
/// 32-bit words) and, for int8, the f32 scales `[channels, groups]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    /// The weight operand's bytes, little-endian, a multiple of 4 long.
    pub bytes: Vec<u8>,
    /// Scales `[channels, groups]` (int8 only; empty otherwise).
    pub scales: Vec<f32>,
}

/// Converts `values`, `channels` rows of `inner` elements (the channel-major layout of every
/// weight in the module doc's table except a matmul `b` read without `trans_b`), to `format`.
///
/// # Errors
/// [`Error::SizeMismatch`] when `values.len() != channels · inner`;
/// [`ArgumentError::Zero`](crate::ArgumentError) for a zero `inner`, [`Error::NonFiniteWeight`] for
/// a value that is not finite (its scale would poison the whole group).
pub fn quantize(
    values: &[f32],
    channels: u64,
    inner: u64,
    format: WeightFormat,
) -> Result<Quantized> {
    let total = channels
        .checked_mul(inner)
        .ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("quantize {channels} x {inner} elements"),
            limit_name: "u64",
        })?;
    if values.len() as u64 != total {
        return Err(Error::SizeMismatch {
            what: format!("quantize: values for {channels} channels of {inner}"),
            expected: total,
            actual: values.len() as u64,
        });
    }
    if inner == 0 {
        return Err(crate::ArgumentError::zero("quantize: elements per row").into());
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFiniteWeight {
            tensor: "(values to quantize)".into(),
            element: i as u64,
            value: values[i],
        });
    }
    let padded = |len: usize| len.next_multiple_of(4);
    Ok(match format.storage() {
        WeightFormat::F32 => Quantized {
            bytes: bytemuck::cast_slice(values).to_vec(),
            scales: Vec::new(),
        },
        WeightFormat::F16 => {
            let mut bytes = Vec::with_capacity(padded(values.len() * 2));
            for &v in values {
                bytes.extend_from_slice(&f32_to_f16(v).to_le_bytes());
            }
            bytes.resize(padded(bytes.len()), 0);
            Quantized {
                bytes,
                scales: Vec::new(),
            }
        }
        WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => {
            let (group, groups) = format.groups(inner);
            let (group, inner) = (group as usize, inner as usize);
            let mut bytes = vec![0u8; padded(values.len())];
            let mut scales = Vec::with_capacity((channels * groups) as usize);
            for (c, row) in values.chunks_exact(inner).enumerate() {
                for (g, part) in row.chunks(group).enumerate() {
                    let max = part.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
                    scales.push(scale);
                    let first = c * inner + g * group;
                    for (i, &v) in part.iter().enumerate() {
                        let q = (v / scale).round().clamp(-127.0, 127.0) as i8;
                        bytes[first + i] = q as u8;
                    }
                }
            }
            Quantized { bytes, scales }
        }
    })
}

/// Read access to a stored weight operand: element `e` of channel `ch`, at inner position `p`.
/// The caller maps `e` to `(ch, p)` by the op's layout (module doc).
#[derive(Copy, Clone, Debug)]
#[doc(hidden)]
pub struct WeightView<'a> {
    bytes: &'a [u8],
    len: usize,
    scales: &'a [f32],
    format: WeightFormat,
    group: usize,
    groups: usize,
}

/// An int8 weight's stored values and scales ([`WeightView::int8`]).
#[derive(Copy, Clone, Debug)]
#[doc(hidden)]
pub struct Int8Parts<'a> {
    /// The stored values, one per element of the view.
    pub q: &'a [i8],
    /// Scales `[channels, groups]`, at least `channels · groups` of them.
    pub scales: &'a [f32],
    /// Inner elements per scale (the whole row for per-channel scales).
    pub group: usize,
    /// Scales per channel.
    pub groups: usize,
}

impl<'a> WeightView<'a> {
    /// A view of `len` elements in `format` over rows of `inner` elements.
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] when `bytes` or `scales` are too short.
    pub fn new(
        bytes: &'a [u8],
        scales: &'a [f32],
        len: u64,
        channels: u64,
        inner: u64,
        format: WeightFormat,
    ) -> Result<Self> {
        let need = len * format.dtype().size();
        if (bytes.len() as u64) < need {
            return Err(Error::SizeMismatch {
                what: format!("{} weight bytes", format.name()),
                expected: need,
                actual: bytes.len() as u64,
            });
        }
        let (group, groups) = format.groups(inner.max(1));
        if format.has_scales() && (scales.len() as u64) < channels * groups {
            return Err(Error::SizeMismatch {
                what: "int8 weight scales".into(),
                expected: channels * groups,
                actual: scales.len() as u64,
            });
        }
        Ok(WeightView {
            bytes,
            len: len as usize,
            scales,
            format: format.storage(),
            group: group as usize,
            groups: groups as usize,
        })
    }

    /// The stored halves of an f16 weight, when its bytes can be read as `u16` in place (2-byte
    /// aligned, little-endian target): kernels then decode them as they load them.
    pub fn halves(&self) -> Option<&'a [u16]> {
        if self.format != WeightFormat::F16 || cfg!(target_endian = "big") {
            return None;
        }
        bytemuck::try_cast_slice(&self.bytes[..2 * self.len]).ok()
    }

    /// The stored values and scales of an int8 weight, read in place (`i8` has no alignment):
    /// kernels then widen the values as they load them and apply the scales themselves. Element
    /// `e` of channel `ch` at inner position `p` is `q[e] · scales[ch · groups + p / group]`, as
    /// [`WeightView::at`] gives it.
    pub fn int8(&self) -> Option<Int8Parts<'a>> {
        let WeightFormat::Int8 { .. } = self.format else {
            return None;
        };
        Some(Int8Parts {
            q: bytemuck::cast_slice(&self.bytes[..self.len]),
            scales: self.scales,
            group: self.group,
            groups: self.groups,
        })
    }

    /// Element `e`, in channel `ch` at inner position `p`, as f32.
    #[inline]
    pub fn at(&self, e: usize, ch: usize, p: usize) -> f32 {
        match self.format {
            WeightFormat::F32 => bytemuck::pod_read_unaligned(&self.bytes[4 * e..4 * e + 4]),
            WeightFormat::F16 => f16_to_f32(u16::from_le_bytes([
                self.bytes[2 * e],
                self.bytes[2 * e + 1],
            ])),
            WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => {
                f32::from(self.bytes[e] as i8) * self.scales[ch * self.groups + p / self.group]
            }
        }
    }

    /// Elements of the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `e0..e0 + out.len()` as f32 into `out`, which lie along one row: channel `ch`,
    /// inner positions from `p0` (the inner axis is contiguous in every weight layout but a
    /// matmul `b` read without `trans_b`). The values of [`WeightView::at`], in loops that
    /// vectorise: the scale changes only at group boundaries.
    pub fn row_run(&self, e0: usize, ch: usize, p0: usize, out: &mut [f32]) {
        let WeightFormat::Int8 { .. } = self.format else {
            return self.contiguous(e0, out);
        };
        let q = &self.bytes[e0..e0 + out.len()];
        let mut done = 0;
        while done < out.len() {
            let p = p0 + done;
            let part = (self.group - p % self.group).min(out.len() - done);
            let scale = self.scales[ch * self.groups + p / self.group];
            for (o, &b) in out[done..done + part].iter_mut().zip(&q[done..done + part]) {
                *o = f32::from(b as i8) * scale;
            }
            done += part;
        }
    }

    /// Elements `e0..e0 + out.len()` as f32 into `out`, which lie across channels: element
    /// `e0 + i` is channel `ch0 + i` at inner position `p` (a row of a matmul `b` `[k, n]`).
    pub fn channel_run(&self, e0: usize, ch0: usize, p: usize, out: &mut [f32]) {
        let WeightFormat::Int8 { .. } = self.format else {
            return self.contiguous(e0, out);
        };
        let q = &self.bytes[e0..e0 + out.len()];
        let first = ch0 * self.groups + p / self.group;
        // `new` checked `channels · groups` scales, and every channel here is below `channels`.
        debug_assert!(out.is_empty() || first + (out.len() - 1) * self.groups < self.scales.len());
        let scales = self.scales[first..].iter().step_by(self.groups);
        for ((o, &b), &scale) in out.iter_mut().zip(q).zip(scales) {
            *o = f32::from(b as i8) * scale;
        }
    }

    /// Elements `e0..e0 + out.len()` of an f32 or f16 view (no scales: the channel is irrelevant).
    fn contiguous(&self, e0: usize, out: &mut [f32]) {
        let size = self.format.dtype().size() as usize;
        let src = &self.bytes[size * e0..size * (e0 + out.len())];
        if size == 4 {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        } else {
            decode_halves(src, out);
        }
    }
}

/// The f32 values of a weight stored by [`quantize`] (its inverse, up to rounding): `channels`
/// rows of `inner` elements.
///
/// # Errors
/// [`Error::SizeMismatch`] when `bytes` or `scales` are too short for `channels · inner`.
pub fn dequantize(
    bytes: &[u8],
    scales: &[f32],
    channels: u64,
    inner: u64,
    format: WeightFormat,
) -> Result<Vec<f32>> {
    let len = channels.saturating_mul(inner);
    let view = WeightView::new(bytes, scales, len, channels, inner, format)?;
    let inner = inner.max(1) as usize;
    Ok((0..len as usize)
        .map(|e| view.at(e, e / inner, e % inner))
        .collect())
}

#[cfg(test)]
mod tests;
