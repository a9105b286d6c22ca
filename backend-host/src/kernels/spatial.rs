//! Host ops that move data by index arithmetic: 2-D convolution, max pooling, 4-D permutation.
//!
//! Convolution is lowered to a matrix product (im2col, as PyTorch's CPU `slow_conv2d` and
//! Caffe do): per image, the receptive fields are gathered into `col [c_in·kh·kw, oh·ow]`, then
//! `y [c_out, oh·ow] = weight [c_out, c_in·kh·kw] · col` runs on the threaded `sgemm` of
//! `matmul`. The gather costs `kh·kw` copies of the input, small against the product's
//! `c_out·c_in·kh·kw·oh·ow` multiply-adds. Pooling and permutation stay direct loops.

use super::matmul::{self, Shape};
use crate::Result;
use crate::ops::Op;

/// NCHW cross-correlation with zero padding; `out = (oh, ow)` from [`Op::conv_out`].
/// Each output is the `sgemm` sum over `ci, ky, kx`, then the bias is added.
///
/// # Errors
/// As [`matmul::matmul`] (slice lengths that disagree with the op).
pub(super) fn conv2d(
    op: &Op,
    (oh, ow): (u32, u32),
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) -> Result<()> {
    let Some(dims) = op.conv2d_dims() else {
        debug_assert!(false, "conv2d called with {}", op.name());
        return Ok(());
    };
    let [_, c_in, h, w, c_out, kh, kw, stride, pad] = dims.map(|v| v as usize);
    let [oh, ow] = [oh, ow].map(|v| v as usize);
    let out_plane = oh * ow;
    let k = c_in * kh * kw;
    let shape = Shape {
        batch: 1,
        m: c_out,
        n: out_plane,
        k,
        trans_a: false,
        trans_b: false,
        broadcast_b: false,
    };
    let mut col = vec![0f32; k * out_plane];
    for (xn, yn) in x
        .chunks_exact(c_in * h * w)
        .zip(y.chunks_exact_mut(c_out * out_plane))
    {
        im2col(xn, (c_in, h, w), (kh, kw, stride, pad), (oh, ow), &mut col);
        matmul::matmul(&shape, weight, &col, None, 1.0, yn)?;
        if let Some(bias) = bias {
            for (yc, &b) in yn.chunks_exact_mut(out_plane).zip(bias) {
                yc.iter_mut().for_each(|v| *v += b);
            }
        }
    }
    Ok(())
}

/// Gathers the receptive fields of one image `x [c_in, h, w]` into `col [c_in·kh·kw, oh·ow]`:
/// row `(ci, ky, kx)` holds, for every output position, the input it multiplies (0 in padding).
fn im2col(
    x: &[f32],
    (c_in, h, w): (usize, usize, usize),
    (kh, kw, stride, pad): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    col: &mut [f32],
) {
    let mut rows = col.chunks_exact_mut(oh * ow);
    for ci in 0..c_in {
        let plane = &x[ci * h * w..(ci + 1) * h * w];
        for ky in 0..kh {
            for kx in 0..kw {
                let Some(row) = rows.next() else { return };
                for oy in 0..oh {
                    // Input row, in padded coordinates shifted back by `pad` (wraps past `h`
                    // when it falls in the top padding).
                    let iy = (oy * stride + ky).wrapping_sub(pad);
                    let out = &mut row[oy * ow..(oy + 1) * ow];
                    if iy >= h {
                        out.fill(0.0);
                        continue;
                    }
                    let src = &plane[iy * w..(iy + 1) * w];
                    for (ox, v) in out.iter_mut().enumerate() {
                        let ix = (ox * stride + kx).wrapping_sub(pad);
                        *v = if ix < w { src[ix] } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// NCHW max pooling without padding; `out = (oh, ow)` from [`Op::conv_out`].
pub(super) fn max_pool2d(op: &Op, (oh, ow): (u32, u32), x: &[f32], y: &mut [f32]) {
    let Op::MaxPool2d {
        h, w, k, stride, ..
    } = *op
    else {
        debug_assert!(false, "max_pool2d called with {}", op.name());
        return;
    };
    let [h, w, k, stride, oh, ow] = [h, w, k, stride, oh, ow].map(|v| v as usize);
    for (xp, yp) in x.chunks_exact(h * w).zip(y.chunks_exact_mut(oh * ow)) {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best = xp[oy * stride * w + ox * stride];
                for ky in 0..k {
                    for kx in 0..k {
                        let v = xp[(oy * stride + ky) * w + ox * stride + kx];
                        if v > best {
                            best = v;
                        }
                    }
                }
                yp[oy * ow + ox] = best;
            }
        }
    }
}

/// `y[o0, o1, o2, o3] = x[i]` where input axis `perm[a]` has index `o_a`.
pub(super) fn permute(dims: [u32; 4], perm: [u8; 4], x: &[f32], y: &mut [f32]) {
    let d = dims.map(|v| v as usize);
    let in_strides = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
    let out_dims = Op::permuted_dims(dims, perm).map(|v| v as usize);
    // Input stride of each output axis.
    let s = perm.map(|p| in_strides[usize::from(p & 3)]);
    let run = out_dims[3];
    let mut o = 0;
    for i0 in 0..out_dims[0] {
        for i1 in 0..out_dims[1] {
            for i2 in 0..out_dims[2] {
                let base = i0 * s[0] + i1 * s[1] + i2 * s[2];
                let y = &mut y[o..o + run];
                if s[3] == 1 {
                    // The last axis stays last (attention's head split and merge): whole runs.
                    y.copy_from_slice(&x[base..base + run]);
                } else {
                    for (i3, y) in y.iter_mut().enumerate() {
                        *y = x[base + i3 * s[3]];
                    }
                }
                o += run;
            }
        }
    }
}
