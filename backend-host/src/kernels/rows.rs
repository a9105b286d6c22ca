//! Host row-wise reductions: softmax, layer norm, L2 normalisation, masked mean pooling.
//!
//! These are the ops whose GPU kernels reduce across a workgroup. The host sums rows in f64 and
//! rounds once to f32, which stays within a rounding of the exact value however long the row is
//! (PyTorch's cascade sums get close to that; a plain f32 running sum drifts by ~`cols`·ε). A
//! row's sum of squares or deviations runs in eight interleaved f64 partial sums ([`sum_f64`]):
//! one chain of dependent additions would cost an addition's latency per element. The
//! element-wise arithmetic around the sums is f32. Formulas follow PyTorch (see each function).

/// `Σ f(v)` over `xs` in f64: eight partial sums (sum `l` takes the elements `p ≡ l (mod 8)` in
/// order), added pairwise, then the elements past the last multiple of eight in order. The same
/// row gives the same bits wherever it falls in a tensor.
#[inline(always)]
pub(super) fn sum_f64(xs: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(f64::from(v));
        }
    }
    tail.iter()
        .fold(pairwise_sum(acc), |sum, &v| sum + f(f64::from(v)))
}

/// The sum of `v` in a fixed pairwise order: halves added until one lane is left (`L` a power of
/// two). The dot kernel's lane sums and [`sum_f64`] both promise this order.
#[inline(always)]
pub(super) fn pairwise_sum<T: Copy + std::ops::AddAssign, const L: usize>(mut v: [T; L]) -> T {
    let mut width = L;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            let upper = v[l + width];
            v[l] += upper;
        }
    }
    v[0]
}

/// Softmax over rows of `cols`, the first of which is row `row0` of the op; `mask` is
/// `(mask, rows_per_mask)` for the whole op. A column is kept when its mask value is non-zero;
/// dropped columns are 0, and a row with no kept column is all 0.
///
/// `y = exp(x − max) / Σ exp(x − max)`, the maximum taken over kept columns.
pub(super) fn softmax(
    x: &[f32],
    row0: usize,
    mask: Option<(&[f32], usize)>,
    cols: usize,
    y: &mut [f32],
) {
    for (r, (xr, yr)) in x
        .chunks_exact(cols)
        .zip(y.chunks_exact_mut(cols))
        .enumerate()
    {
        let r = row0 + r;
        let mrow = mask.map(|(m, per)| &m[(r / per) * cols..(r / per + 1) * cols]);
        let keep = |j: usize| mrow.is_none_or(|m| m[j] != 0.0);
        let mut max = f32::NEG_INFINITY;
        let mut kept = 0usize;
        for (j, &v) in xr.iter().enumerate() {
            if keep(j) {
                kept += 1;
                max = max.max(v);
            }
        }
        if kept == 0 {
            yr.fill(0.0);
            continue;
        }
        let mut sum = 0.0f64;
        for (j, (yv, &v)) in yr.iter_mut().zip(xr).enumerate() {
            *yv = if keep(j) { (v - max).exp() } else { 0.0 };
            sum += f64::from(*yv);
        }
        let sum = sum as f32;
        for yv in yr.iter_mut() {
            *yv /= sum;
        }
    }
}

/// Layer norm over rows of `cols`: `y = (x − mean) · 1/√(var + eps) · gamma + beta`, population
/// variance computed in a second pass over `x − mean` (mean, variance and `1/√(var + eps)` in
/// f64, then rounded to f32).
pub(super) fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    cols: usize,
    eps: f32,
    y: &mut [f32],
) {
    let n = cols as f64;
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let mean = sum_f64(xr, |v| v) / n;
        let var = sum_f64(xr, |v| (v - mean) * (v - mean)) / n;
        let rstd = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
        let mean = mean as f32;
        for (((yv, &v), &g), &b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *yv = (v - mean) * rstd * g + b;
        }
    }
}

/// `y = x / max(‖x‖₂, eps)` per row of `cols`, as `torch.nn.functional.normalize`.
pub(super) fn l2_normalize(x: &[f32], cols: usize, eps: f32, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let sum_sq = sum_f64(xr, |v| v * v);
        let norm = (sum_sq.sqrt() as f32).max(eps);
        for (yv, &v) in yr.iter_mut().zip(xr) {
            *yv = v / norm;
        }
    }
}

/// Masked mean over the sequence axis of `x [batch, seq, dim]` with `mask [batch, seq]`:
/// `y[b] = Σₛ mask[b,s]·x[b,s] / max(Σₛ mask[b,s], 1e-9)`, as sentence-transformers' pooling.
pub(super) fn mean_pool(x: &[f32], mask: &[f32], seq: usize, dim: usize, y: &mut [f32]) {
    for ((xb, mb), yb) in x
        .chunks_exact(seq * dim)
        .zip(mask.chunks_exact(seq))
        .zip(y.chunks_exact_mut(dim))
    {
        yb.fill(0.0);
        let mut count = 0.0f32;
        for (xs, &mv) in xb.chunks_exact(dim).zip(mb) {
            count += mv;
            for (yv, &v) in yb.iter_mut().zip(xs) {
                *yv += mv * v;
            }
        }
        let count = count.max(1e-9);
        for yv in yb.iter_mut() {
            *yv /= count;
        }
    }
}
