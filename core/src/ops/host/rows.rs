//! Host row-wise reductions: softmax, layer norm, L2 normalisation, masked mean pooling.
//!
//! These are the ops whose GPU kernels reduce across a workgroup; on the host each row is summed
//! in index order. Formulas follow PyTorch (see each function).

/// Softmax over rows of `cols`; `mask` is `(mask, rows_per_mask)`. A column is kept when its mask
/// value is non-zero; dropped columns are 0, and a row with no kept column is all 0.
///
/// `y = exp(x − max) / Σ exp(x − max)`, the maximum taken over kept columns.
pub(super) fn softmax(x: &[f32], mask: Option<(&[f32], usize)>, cols: usize, y: &mut [f32]) {
    for (r, (xr, yr)) in x
        .chunks_exact(cols)
        .zip(y.chunks_exact_mut(cols))
        .enumerate()
    {
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
        let mut sum = 0.0f32;
        for (j, (yv, &v)) in yr.iter_mut().zip(xr).enumerate() {
            *yv = if keep(j) { (v - max).exp() } else { 0.0 };
            sum += *yv;
        }
        for yv in yr.iter_mut() {
            *yv /= sum;
        }
    }
}

/// Layer norm over rows of `cols`: `y = (x − mean) · 1/√(var + eps) · gamma + beta`, population
/// variance computed in a second pass over `x − mean` (as stable as PyTorch's Welford moments).
pub(super) fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    cols: usize,
    eps: f32,
    y: &mut [f32],
) {
    let n = cols as f32;
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let mean = xr.iter().sum::<f32>() / n;
        let var = xr.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let rstd = 1.0 / (var + eps).sqrt();
        for (((yv, &v), &g), &b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *yv = (v - mean) * rstd * g + b;
        }
    }
}

/// `y = x / max(‖x‖₂, eps)` per row of `cols`, as `torch.nn.functional.normalize`.
pub(super) fn l2_normalize(x: &[f32], cols: usize, eps: f32, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let norm = xr.iter().map(|&v| v * v).sum::<f32>().sqrt().max(eps);
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
