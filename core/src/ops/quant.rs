//! Weight formats: how the weight operand of [`Op::MatMul`](crate::ops::Op::MatMul) (`b`),
//! [`Op::Conv2d`](crate::ops::Op::Conv2d) (`weight`) and [`Op::Embedding`](crate::ops::Op::Embedding)
//! (`table`) is stored, and the host conversions to and from it.
//!
//! Weights are most of an inference model's memory; storing them in fewer bits and dequantising
//! in the kernel as they are loaded (never a full-precision copy on the device) is the standard
//! way to cut it. Two formats besides f32:
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
use crate::{Error, Result};

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
}

impl WeightFormat {
    /// The element type of the weight operand.
    pub fn dtype(self) -> DType {
        match self {
            WeightFormat::F32 => DType::F32,
            WeightFormat::F16 => DType::F16,
            WeightFormat::Int8 { .. } => DType::I8,
        }
    }

    /// Short name: "f32", "f16", "int8".
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
            WeightFormat::Int8 { .. } => "int8",
        }
    }

    /// Whether a scales operand follows the weight.
    pub fn has_scales(self) -> bool {
        matches!(self, WeightFormat::Int8 { .. })
    }

    /// `(group, groups)` for rows of `inner` elements: the effective group size (the whole row for
    /// per-channel scales) and the number of scales per channel. `inner` is at least 1.
    pub fn groups(self, inner: u64) -> (u64, u64) {
        match self {
            WeightFormat::Int8 { group } if group > 0 && u64::from(group) < inner => {
                let g = u64::from(group);
                (g, inner.div_ceil(g))
            }
            _ => (inner, 1),
        }
    }
}

/// `v` as IEEE binary16 bits, rounded to nearest even; overflow gives ±infinity, NaN stays NaN.
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        // Infinity, or a quiet NaN keeping the top payload bits.
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal half (or zero): shift the implicit-one mantissa right, rounding to even.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = u32::from(rem > mid || (rem == mid && half & 1 == 1));
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let round = u32::from(rem > 0x1000 || (rem == 0x1000 && half & 1 == 1));
    // A carry out of the mantissa rounds up into the exponent (and to infinity at the top): the
    // bit layout makes that the correct result.
    sign | (half + round) as u16
}

/// The f32 value of IEEE binary16 bits (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m · 2⁻²⁴, exactly representable in f32.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
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
/// [`Error::SizeMismatch`] when `values.len() != channels · inner`; [`Error::InvalidArgument`]
/// for a zero `inner` or a value that is not finite (its scale would poison the whole group).
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
        return Err(Error::invalid("quantize: rows of zero elements"));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!(
            "quantize: element {i} is {} (weights must be finite)",
            values[i]
        )));
    }
    let padded = |len: usize| len.next_multiple_of(4);
    Ok(match format {
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
        WeightFormat::Int8 { .. } => {
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
pub(crate) struct WeightView<'a> {
    bytes: &'a [u8],
    scales: &'a [f32],
    format: WeightFormat,
    group: usize,
    groups: usize,
}

impl<'a> WeightView<'a> {
    /// A view of `len` elements in `format` over rows of `inner` elements.
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] when `bytes` or `scales` are too short.
    pub(crate) fn new(
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
            scales,
            format,
            group: group as usize,
            groups: groups as usize,
        })
    }

    /// Element `e`, in channel `ch` at inner position `p`, as f32.
    #[inline]
    pub(crate) fn at(&self, e: usize, ch: usize, p: usize) -> f32 {
        match self.format {
            WeightFormat::F32 => bytemuck::pod_read_unaligned(&self.bytes[4 * e..4 * e + 4]),
            WeightFormat::F16 => f16_to_f32(u16::from_le_bytes([
                self.bytes[2 * e],
                self.bytes[2 * e + 1],
            ])),
            WeightFormat::Int8 { .. } => {
                f32::from(self.bytes[e] as i8) * self.scales[ch * self.groups + p / self.group]
            }
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
