//! `A`'s rows quantised for the int8-dynamic product (the parent's doc): unsigned 8-bit values
//! with a zero point per row, rows padded to whole vector steps, with each row's scale.

use rayon::prelude::*;

use super::super::Shape;
use super::STEP;

/// 1.5·2²³: `x + ROUND` holds `round_ties_even(x)` in its low mantissa bits for `|x| < 2²²`.
const ROUND: f32 = 12_582_912.0;

/// Rows below this many elements are quantised on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 16;

/// Quantised rows of op(A), every `a` matrix's in order (row `r` is row `r % m` of matrix
/// `r / m`).
#[derive(Debug, Default)]
pub(super) struct Rows {
    /// `ld` bytes per row: the row's `u`, then padding of any value.
    pub u: Vec<u8>,
    /// Bytes between rows: `k` rounded up to a multiple of [`STEP`].
    pub ld: usize,
    /// Each row's step `(hi − lo) / 255`; NaN for a row holding a non-finite value.
    pub scale: Vec<f32>,
    /// Each row's zero point `z`.
    pub zero: Vec<i32>,
}

/// One row's outputs: its `ld` bytes, its scale, its zero point.
type RowOut<'a> = ((&'a mut [u8], &'a mut f32), &'a mut i32);

/// Quantises every row of op(A) into `out` (buffers reused: resized and overwritten).
pub(super) fn quantize(s: &Shape, a: &[f32], parallel: bool, out: &mut Rows) {
    let (m, k) = (s.m, s.k);
    let total = s.batch * m;
    let ld = k.next_multiple_of(STEP);
    out.ld = ld;
    // Only resized: every row's first `k` bytes, scale and zero point are written below, and the
    // padding is never zeroed (the kernels pair it with zero bytes of `B`).
    out.u.resize(total * ld, 0);
    out.scale.resize(total, 0.0);
    out.zero.resize(total, 0);
    let one = |(r, ((u, scale), zero)): (usize, RowOut<'_>)| {
        let u = &mut u[..k];
        (*scale, *zero) = if s.trans_a {
            // Row `i` of op(A) is column `i` of the stored `[k, m]` matrix.
            let (mat, i) = (r / m, r % m);
            let row: Vec<f32> = a[mat * m * k + i..]
                .iter()
                .step_by(m)
                .take(k)
                .copied()
                .collect();
            quantize_row(&row, u)
        } else {
            quantize_row(&a[r * k..][..k], u)
        };
    };
    if parallel && total * k >= PARALLEL_MIN_ELEMENTS {
        out.u
            .par_chunks_mut(ld)
            .zip(out.scale.par_iter_mut())
            .zip(out.zero.par_iter_mut())
            .enumerate()
            .for_each(one);
    } else {
        out.u
            .chunks_mut(ld)
            .zip(out.scale.iter_mut())
            .zip(out.zero.iter_mut())
            .enumerate()
            .for_each(one);
    }
}

/// Quantises `row` into `u` (as long); returns the row's scale and zero point. With AVX2 the
/// same loops run on 8-wide vectors (the same operations, so the same bits).
pub(super) fn quantize_row(row: &[f32], u: &mut [u8]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { quantize_row_avx2(row, u) };
    }
    quantize_row_lanes(row, u)
}

/// [`quantize_row`] compiled for AVX2, its scan in explicit `vminps`/`vmaxps` (the compiler
/// turned the portable scan's selects into blends and shuffles).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(row: &[f32], u: &mut [u8]) -> (f32, i32) {
    use std::arch::x86_64::*;
    let (mut lo, mut hi, mut poison) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    let mut chunks = row.chunks_exact(8);
    // SAFETY: every load reads one whole chunk of 8 floats, every store one array of 8.
    unsafe {
        let (mut vlo, mut vhi, mut vpoison) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let zero = _mm256_setzero_ps();
        for c in &mut chunks {
            let v = _mm256_loadu_ps(c.as_ptr());
            // `min(v, lo)` is `v < lo ? v : lo` lane by lane, as the portable scan selects
            // (NaN keeps `lo`); likewise `max`.
            vlo = _mm256_min_ps(v, vlo);
            vhi = _mm256_max_ps(v, vhi);
            vpoison = _mm256_add_ps(vpoison, _mm256_mul_ps(v, zero));
        }
        _mm256_storeu_ps(lo.as_mut_ptr(), vlo);
        _mm256_storeu_ps(hi.as_mut_ptr(), vhi);
        _mm256_storeu_ps(poison.as_mut_ptr(), vpoison);
    }
    scan_tail(chunks.remainder(), &mut lo, &mut hi, &mut poison);
    quantize_scanned(row, u, (lo, hi, poison))
}

/// Per-lane extremes and poison of a row (see [`quantize_row_lanes`]).
type Scan = ([f32; 8], [f32; 8], [f32; 8]);

/// [`quantize_row`]'s loops.
#[inline(always)]
pub(super) fn quantize_row_lanes(row: &[f32], u: &mut [u8]) -> (f32, i32) {
    // Eight lanes, so the loop vectorises: the extremes (from 0, so the range holds 0), and
    // `Σ v · 0`, which is NaN exactly when some value is infinite or NaN.
    let (mut lo, mut hi, mut poison) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            lo[l] = if c[l] < lo[l] { c[l] } else { lo[l] };
            hi[l] = if c[l] > hi[l] { c[l] } else { hi[l] };
            poison[l] += c[l] * 0.0;
        }
    }
    scan_tail(chunks.remainder(), &mut lo, &mut hi, &mut poison);
    quantize_scanned(row, u, (lo, hi, poison))
}

/// The scan's last values (fewer than 8), into the first lanes.
#[inline(always)]
fn scan_tail(rest: &[f32], lo: &mut [f32; 8], hi: &mut [f32; 8], poison: &mut [f32; 8]) {
    for (l, &v) in rest.iter().enumerate() {
        lo[l] = if v < lo[l] { v } else { lo[l] };
        hi[l] = if v > hi[l] { v } else { hi[l] };
        poison[l] += v * 0.0;
    }
}

/// The row's scale and zero point from its scan, and its bytes into `u`.
#[inline(always)]
fn quantize_scanned(row: &[f32], u: &mut [u8], (lo, hi, poison): Scan) -> (f32, i32) {
    let lo = lo.iter().fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = hi.iter().fold(0f32, |m, &v| if v > m { v } else { m });
    let span = hi - lo;
    if poison.iter().sum::<f32>().is_nan() || !span.is_finite() {
        u.fill(0);
        return (f32::NAN, 0);
    }
    if span == 0.0 {
        u.fill(0);
        return (0.0, 0);
    }
    let inv = 255.0 / span;
    let zero = round(-lo * inv);
    for (o, &v) in u.iter_mut().zip(row) {
        *o = (round(v * inv) + zero).clamp(0, 255) as u8;
    }
    (span / 255.0, zero)
}

/// `x` rounded to the nearest integer, ties to even, for `|x| ≤ 2²²` (here at most 255 and a
/// rounding).
#[inline(always)]
fn round(x: f32) -> i32 {
    (x + ROUND).to_bits() as i32 - ROUND.to_bits() as i32
}
