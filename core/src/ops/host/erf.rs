//! Single-precision error function for the exact GELU.
//!
//! Rust's standard library has no stable `erf`, and the short approximations found in textbooks
//! (Abramowitz–Stegun 7.1.26, error ~1.5e-7 absolute) are not accurate enough to serve as the
//! reference other backends are checked against. This is a port of FreeBSD's `s_erff.c` (the
//! rational approximations musl and the `libm` crate use), accurate to about 1 ulp, so it agrees
//! with the `erff`/Sleef `erf` that PyTorch calls to within rounding. The WGSL GELU kernel
//! (`ops/wgsl/gelu.wgsl`) uses the same coefficients, so host and GPU share one algorithm.
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
fn horner(c: &[f32], s: f32) -> f32 {
    c.iter().rev().fold(0.0, |acc, &ci| ci + s * acc)
}

/// `1 + s·(c[0] + s·(c[1] + …))`, the denominators' form.
fn horner1(c: &[f32], s: f32) -> f32 {
    1.0 + s * horner(c, s)
}

/// The error function `erf(x) = 2/√π ∫₀ˣ e^(−t²) dt` in single precision (≤ ~1 ulp).
///
/// `erf(±∞) = ±1`, `erf(NaN) = NaN`.
pub fn erf(x: f32) -> f32 {
    let bits = x.to_bits();
    let negative = bits >> 31 != 0;
    let ix = bits & 0x7fff_ffff;
    if ix >= 0x7f80_0000 {
        // NaN stays NaN; ±inf gives ±1.
        return if x.is_nan() { x } else { 1f32.copysign(x) };
    }
    if ix < 0x3f58_0000 {
        // |x| < 0.84375
        if ix < 0x3180_0000 {
            // |x| < 2^-28: erf(x) ≈ 2x/√π, written so it does not underflow.
            return 0.125 * (8.0 * x + EFX8 * x);
        }
        let z = x * x;
        let y = horner(&PP, z) / horner1(&QQ, z);
        return x + x * y;
    }
    let a = x.abs();
    let y = if ix < 0x3fa0_0000 {
        // |x| < 1.25
        let s = a - 1.0;
        let erfc = 1.0 - ERX - horner(&PA, s) / horner1(&QA, s);
        1.0 - erfc
    } else if ix < 0x40c0_0000 {
        // |x| < 6
        let s = 1.0 / (a * a);
        let (r, big_s) = if ix < 0x4036_db6d {
            // |x| < 1/0.35
            (horner(&RA, s), horner1(&SA, s))
        } else {
            (horner(&RB, s), horner1(&SB, s))
        };
        // Split x² so exp's argument keeps its low bits: z is |x| with 13 low bits cleared.
        let z = f32::from_bits(a.to_bits() & 0xffff_e000);
        let erfc = (-z * z - 0.5625).exp() * ((z - a) * (z + a) + r / big_s).exp() / a;
        1.0 - erfc
    } else {
        // |x| >= 6: erf is 1 - 2^-120, which rounds to 1.
        1.0
    };
    if negative { -y } else { y }
}
