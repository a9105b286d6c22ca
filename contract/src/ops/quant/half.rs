//! IEEE binary16 conversions: the f16 weight format's encode and decode, and a bulk decode that
//! uses F16C where the CPU has it. Both directions round to nearest even and keep infinities and
//! NaN payloads' top bits; decoding is exact.

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
