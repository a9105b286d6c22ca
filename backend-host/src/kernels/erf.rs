//! Single-precision error function for the exact GELU, and GELU over a slice.
//!
//! Rust's standard library has no stable `erf`, and the short approximations found in textbooks
//! (Abramowitz–Stegun 7.1.26, error ~1.5e-7 absolute) are not accurate enough to serve as the
//! reference other backends are checked against. This is FreeBSD's `s_erff.c` (the rational
//! approximations musl and the `libm` crate use), accurate to about 1 ulp, so it agrees with the
//! `erff`/Sleef `erf` that PyTorch calls to within rounding. The WGSL GELU kernel
//! (`ops/wgsl/gelu.wgsl`) uses the same coefficients, so host and GPU share one algorithm.
//!
//! Design: the function is branch-free. Every interval's formula is evaluated and the lane's own
//! is selected, and `exp` is a Cody–Waite reduction with Cephes' `expf` polynomial (≤ 1 ulp on
//! the arguments met here), so a loop over a slice vectorises: [`gelu_slice`] runs eight lanes at
//! a time with AVX2 where the CPU has it. Rust never fuses a multiply and an add, so the scalar
//! [`erf`], the portable loop and the AVX2 loop give the same bits for every input: where an
//! element falls in a slice (a tiled graph's part boundaries) never changes it. Cost: about three
//! intervals' work per element instead of one, far less than a scalar `exp` call per element.
//!
//! Original notice, kept as its licence requires:
//!
//! > Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//! > Developed at SunPro, a Sun Microsystems, Inc. business.
//! > Permission to use, copy, modify, and distribute this software is freely granted, provided
//! > that this notice is preserved.
//! > Conversion to float by Ian Lance Taylor, Cygnus Support, ian@cygnus.com.

// The coefficients, bit-exact from the original's hex comments. Intervals:
// [0, 0.84375): erf = x + x·PP(x²)/(1 + x²·QQ(x²));
// [0.84375, 1.25): erf = ERX + PA(s)/(1 + s·QA(s)), s = |x| − 1 (ERX = erf(1) rounded);
// [1.25, 1/0.35) and [1/0.35, 6): erfc = exp(−x² − 0.5625 + R(1/x²)/(1 + S(1/x²))) / x with RA/SA,
// then RB/SB. EFX8 = 8·(2/√π − 1), for tiny arguments.
const ERX: f32 = f32::from_bits(0x3f58_560b);
const EFX8: f32 = f32::from_bits(0x3f83_75d4);
const PP: [f32; 5] = [
    f32::from_bits(0x3e03_75d4),
    f32::from_bits(0xbea6_6beb),
    f32::from_bits(0xbce9_528f),
    f32::from_bits(0xbbbd_1489),
    f32::from_bits(0xb7c7_56b1),
];
const QQ: [f32; 5] = [
    f32::from_bits(0x3ecb_bbce),
    f32::from_bits(0x3d85_2a63),
    f32::from_bits(0x3ba6_8116),
    f32::from_bits(0x390a_ee49),
    f32::from_bits(0xb684_e21a),
];
const PA: [f32; 7] = [
    f32::from_bits(0xbb1a_cdc6),
    f32::from_bits(0x3ed4_6805),
    f32::from_bits(0xbebe_9208),
    f32::from_bits(0x3ea2_fe54),
    f32::from_bits(0xbde3_1cc2),
    f32::from_bits(0x3d11_51b3),
    f32::from_bits(0xbb0d_f9c0),
];
const QA: [f32; 6] = [
    f32::from_bits(0x3dd9_f331),
    f32::from_bits(0x3f0a_5785),
    f32::from_bits(0x3d93_1ae7),
    f32::from_bits(0x3e01_3307),
    f32::from_bits(0x3c5f_6e13),
    f32::from_bits(0x3c44_5aa3),
];
const RA: [f32; 8] = [
    f32::from_bits(0xbc21_a093),
    f32::from_bits(0xbf31_a0b7),
    f32::from_bits(0xc128_f022),
    f32::from_bits(0xc279_8057),
    f32::from_bits(0xc322_658c),
    f32::from_bits(0xc338_9ae7),
    f32::from_bits(0xc2a2_932b),
    f32::from_bits(0xc11d_077e),
];
const SA: [f32; 8] = [
    f32::from_bits(0x419d_35ce),
    f32::from_bits(0x4309_a863),
    f32::from_bits(0x43d9_486f),
    f32::from_bits(0x4421_58c9),
    f32::from_bits(0x43d6_810b),
    f32::from_bits(0x42d9_451f),
    f32::from_bits(0x40d2_3f7c),
    f32::from_bits(0xbd77_7f97),
];
const RB: [f32; 7] = [
    f32::from_bits(0xbc21_a092),
    f32::from_bits(0xbf4c_9dd4),
    f32::from_bits(0xc18e_104b),
    f32::from_bits(0xc320_a2ea),
    f32::from_bits(0xc41f_6441),
    f32::from_bits(0xc480_230b),
    f32::from_bits(0xc3f1_c275),
];
const SB: [f32; 7] = [
    f32::from_bits(0x41f2_b459),
    f32::from_bits(0x43a2_e571),
    f32::from_bits(0x44c0_1759),
    f32::from_bits(0x4547_fdbb),
    f32::from_bits(0x451f_90ce),
    f32::from_bits(0x43ed_43a7),
    f32::from_bits(0xc1b3_8712),
];

/// Evaluates `c[0] + s·(c[1] + s·(…))` (Horner).
#[inline(always)]
fn horner<const N: usize>(c: &[f32; N], s: f32) -> f32 {
    let mut acc = 0.0;
    let mut i = N;
    while i > 0 {
        i -= 1;
        acc = c[i] + s * acc;
    }
    acc
}

/// `1 + s·(c[0] + s·(c[1] + …))`, the denominators' form.
#[inline(always)]
fn horner1<const N: usize>(c: &[f32; N], s: f32) -> f32 {
    1.0 + s * horner(c, s)
}

/// `a`, or `b` padded with zeros to `a`'s length (a zero highest coefficient leaves Horner's
/// result unchanged), chosen per lane without a branch.
#[inline(always)]
fn pick<const N: usize, const M: usize>(first: bool, a: &[f32; N], b: &[f32; M]) -> [f32; N] {
    std::array::from_fn(|i| {
        if first {
            a[i]
        } else {
            b.get(i).copied().unwrap_or(0.0)
        }
    })
}

/// `e^x` for `x` in about [−87, 88], branch-free: `x = n·ln2 + r` with `|r| ≤ ln2/2` (ln2 split in
/// two so `n·ln2` is exact), Cephes' degree-6 polynomial for `e^r`, then `2^n` by the exponent
/// bits. Within 1 ulp of `e^x` there.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer (ties to even).
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        0.5,
        1.666_666_5e-1,
        4.166_579_6e-2,
        8.333_452e-3,
        1.398_2e-3,
        1.987_569_1e-4,
    ];
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = horner(&P, r) * (r * r) + r + 1.0;
    // `n` is an integer in [−126, 127] for the arguments above, so the bits are a normal 2^n.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// The error function `erf(x) = 2/√π ∫₀ˣ e^(−t²) dt` in single precision (≤ ~1 ulp).
///
/// `erf(±∞) = ±1`, `erf(NaN) = NaN`.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let bits = x.to_bits();
    let ix = bits & 0x7fff_ffff;
    let a = f32::from_bits(ix);
    // [0, 0.84375): x + x·PP(x²)/QQ(x²); below 2^-28, 2x/√π written so it does not underflow.
    let z = x * x;
    let small = x + x * (horner(&PP, z) / horner1(&QQ, z));
    let tiny = 0.125 * (8.0 * x + EFX8 * x);
    // [0.84375, 1.25): 1 − (1 − ERX − PA(s)/QA(s)), s = |x| − 1.
    let s = a - 1.0;
    let mid = 1.0 - (1.0 - ERX - horner(&PA, s) / horner1(&QA, s));
    // [1.25, 6): 1 − erfc, erfc = e^(−z² − 0.5625) · e^((z − a)(z + a) + R/S) / a, with z = |x|
    // with 13 low bits cleared (so the first exponent keeps its low bits) and R/S from RA/SA
    // below 1/0.35, RB/SB above. Clamped so lanes of other intervals stay finite.
    let at = a.clamp(1.25, 6.0);
    let s = 1.0 / (at * at);
    let near = ix < 0x4036_db6d;
    let (r, big_s) = (
        horner(&pick(near, &RA, &RB), s),
        horner1(&pick(near, &SA, &SB), s),
    );
    let zt = f32::from_bits(at.to_bits() & 0xffff_e000);
    let erfc = exp(-zt * zt - 0.5625) * exp((zt - at) * (zt + at) + r / big_s) / at;
    let tail = 1.0 - erfc;
    // |x| ≥ 6 (and ±∞): erf is 1 − 2^-120, which rounds to 1.
    let magnitude = if ix < 0x3fa0_0000 {
        mid
    } else if ix < 0x40c0_0000 {
        tail
    } else {
        1.0
    };
    let y = if ix < 0x3180_0000 {
        tiny
    } else if ix < 0x3f58_0000 {
        small
    } else {
        f32::from_bits(magnitude.to_bits() | (bits & 0x8000_0000))
    };
    if ix > 0x7f80_0000 { x } else { y }
}

/// Exact GELU as PyTorch computes it in f32: `x·0.5·(1 + erf(x·(1/√2)))`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `y[i] = gelu(x[i])` over the shorter of the two, eight lanes at a time with AVX2 where the CPU
/// has it (the same bits as [`gelu`] either way: module doc).
pub fn gelu_slice(x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        unsafe { gelu_avx2(x, y) };
        return;
    }
    gelu_portable(x, y);
}

#[inline(always)]
fn gelu_portable(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = gelu(x);
    }
}

/// [`gelu_portable`] compiled for AVX2 (no FMA: a fused multiply-add would change the bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gelu_avx2(x: &[f32], y: &mut [f32]) {
    gelu_portable(x, y);
}
