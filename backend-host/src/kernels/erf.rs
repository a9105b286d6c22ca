//! Single-precision error function for the exact GELU, and GELU over a slice.
//!
//! Rust's standard library has no stable `erf`, and the short approximations found in textbooks
//! (Abramowitz–Stegun 7.1.26, error ~1.5e-7 absolute) are not accurate enough to serve as the
//! reference other backends are checked against. This one is within about 1 ulp of the true
//! value (mean 0.25 ulp), as FreeBSD's `s_erff.c`, musl's and the `libm` crate's are, so it
//! agrees with the `erff` PyTorch calls to within rounding. The WGSL GELU kernel
//! (`ops/wgsl/erf.wgsl`) evaluates the same formulas with the same coefficients.
//!
//! Design: two intervals, each a rational approximation fitted for this function (weighted
//! least squares iterated towards minimax, coefficients rounded to f32, errors checked in f32
//! arithmetic without fused multiply-adds):
//! * `|x| < 1`: `erf = x + x·P(x²)/Q(x²)`, degrees 3/3 (the correction to `x` is small, so its
//!   rounding costs a fraction of an ulp);
//! * `1 ≤ |x| < 4`: `erf = 1 − e^(−x²)·R(u)/S(u)`, `u = |x| − 1`, degrees 3/4: `erfc` is computed
//!   to a few ulp of itself, at most 0.16, so `1 − erfc` is within an ulp; from 4 on, `erf`
//!   rounds to 1.
//!
//! Branch-free: both intervals are evaluated and the lane's own is selected, and `exp` is a
//! Cody–Waite reduction with Cephes' `expf` polynomial (≤ 1 ulp), so a loop over a slice
//! vectorises: [`gelu_slice`] runs sixteen lanes at a time with AVX-512 or eight with AVX2. Rust
//! never fuses a multiply and an add, so the scalar [`erf`], the portable loop and the SIMD loops
//! give the same bits for every input: where an element falls in a slice (a tiled graph's part
//! boundaries) never changes it. Cost: two rationals, one `exp` and two divisions per element,
//! about half of `s_erff`'s three intervals and two `exp`s (`docs/decisions/erf-two-intervals.md`).

// The coefficients, lowest degree first. `EFX8` = 8·(2/√π − 1), for tiny arguments.
const EFX8: f32 = f32::from_bits(0x3f83_75d4);
const P: [f32; 4] = [
    f32::from_bits(0x3e03_75d4),
    f32::from_bits(0xbea4_0bf9),
    f32::from_bits(0xbd27_5a7d),
    f32::from_bits(0xbbab_58a7),
];
const Q: [f32; 3] = [
    f32::from_bits(0x3ede_3b5f),
    f32::from_bits(0x3d98_84d7),
    f32::from_bits(0x3bab_6252),
];
const R: [f32; 4] = [
    f32::from_bits(0x3eda_ec3c),
    f32::from_bits(0x3ec6_a031),
    f32::from_bits(0x3e0c_3dd5),
    f32::from_bits(0x3c95_c746),
];
const S: [f32; 4] = [
    f32::from_bits(0x3fc5_eba9),
    f32::from_bits(0x3f72_8082),
    f32::from_bits(0x3e8c_d6c6),
    f32::from_bits(0x3d04_c0fc),
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
    // |x| < 1: x + x·P(x²)/Q(x²); below 2^-28, 2x/√π written so it does not underflow.
    let z = x * x;
    let small = x + x * (horner(&P, z) / horner1(&Q, z));
    let tiny = 0.125 * (8.0 * x + EFX8 * x);
    // 1 ≤ |x| < 4: 1 − e^(−x²)·R(u)/S(u), u = |x| − 1. Clamped so that lanes of the other
    // interval stay finite; from 4 on it is 1 − erfc(4), which rounds to 1.
    let at = a.clamp(1.0, 4.0);
    let u = at - 1.0;
    let erfc = exp(-(at * at)) * (horner(&R, u) / horner1(&S, u));
    let tail = f32::from_bits((1.0 - erfc).to_bits() | (bits & 0x8000_0000));
    let y = if ix < 0x3180_0000 {
        tiny
    } else if ix < 0x3f80_0000 {
        small
    } else {
        tail
    };
    if ix > 0x7f80_0000 { x } else { y }
}

/// Exact GELU as PyTorch computes it in f32: `x·0.5·(1 + erf(x·(1/√2)))`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `y[i] = gelu(x[i])` over the shorter of the two, sixteen lanes at a time where 512-bit lanes
/// pay (`ops::cpu`), eight with AVX2 (the same bits as [`gelu`] either way: module doc).
pub fn gelu_slice(x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::cpu::wide_vectors() {
        // SAFETY: `wide_vectors` holds only where the CPU has AVX-512 F.
        unsafe { gelu_avx512(x, y) };
        return;
    }
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

/// [`gelu_portable`] compiled for AVX-512 F (Rust fuses no multiply-add on its own: the same
/// bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gelu_avx512(x: &[f32], y: &mut [f32]) {
    gelu_portable(x, y);
}
