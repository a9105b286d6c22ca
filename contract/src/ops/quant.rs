//! Weight formats: how the weight operand of [`Op::MatMul`] (`b`),
//! [`Op::Conv2d`] (`weight`) and [`Op::Embedding`]
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
///
/// Branch-free, so loops over a slice of halves vectorise (the host kernels decode f16 weights
/// with it at every product): a normal half moves into f32's exponent and mantissa fields by
/// integer arithmetic, a subnormal `m · 2⁻²⁴` is computed from the integer `m` (exact, and no
/// subnormal float arithmetic, which is slow on x86), and infinity or NaN (quieted, payload kept)
/// is chosen by select.
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Rebias the exponent from 15 to 127.
    let normal = (em << 13) + ((127 - 15) << 23);
    let subnormal = (em as f32 * f32::from_bits(0x3380_0000)).to_bits();
    let special = 0x7f80_0000 | (em << 13) | if em > 0x7c00 { 0x40_0000 } else { 0 };
    let bits = if em < 0x400 {
        subnormal
    } else if em >= 0x7c00 {
        special
    } else {
        normal
    };
    f32::from_bits(sign | bits)
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
            format,
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
            WeightFormat::Int8 { .. } => {
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

/// Decodes the little-endian halves `src` (two bytes each) into `out`: eight per instruction
/// with x86-64's F16C where the CPU has it (the decode is most of the cost of an f16 product on
/// the host at small batches), else [`f16_to_f32`] per element. Both give the same bits.
#[doc(hidden)]
pub fn decode_halves(src: &[u8], out: &mut [f32]) {
    let n = out.len().min(src.len() / 2);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU supports AVX and F16C (checked just above).
        unsafe { decode_halves_f16c(&src[..2 * n], &mut out[..n]) };
        return;
    }
    for (o, c) in out[..n].iter_mut().zip(src.chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

/// [`decode_halves`] with F16C's `vcvtph2ps`; `src` holds exactly `2 · out.len()` bytes.
///
/// # Safety
/// The CPU must support AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn decode_halves_f16c(src: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let whole = out.len() / 8 * 8;
    for i in (0..whole).step_by(8) {
        // SAFETY: elements `i..i + 8` lie inside both slices (`i + 8 <= whole <= out.len()`,
        // and `src` holds two bytes per element of `out`); both accesses are unaligned ones.
        unsafe {
            let halves = _mm_loadu_si128(src.as_ptr().add(2 * i).cast::<__m128i>());
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(halves));
        }
    }
    for (o, c) in out[whole..]
        .iter_mut()
        .zip(src[2 * whole..].chunks_exact(2))
    {
        *o = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
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
