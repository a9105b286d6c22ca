//! Host ops that move data by index arithmetic: 2-D convolution, max pooling, 4-D permutation.
//!
//! Direct loops, written to mirror the definitions in [`Op`](crate::ops::Op) (the sample CNN is
//! small; the reference's job here is to be plainly right).

use crate::ops::Op;

/// NCHW cross-correlation with zero padding; `out = (oh, ow)` from [`Op::conv_out`].
/// Each output sums `ci, ky, kx` in order from 0, then adds the bias.
pub(super) fn conv2d(
    op: &Op,
    (oh, ow): (u32, u32),
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let Op::Conv2d {
        c_in,
        h,
        w,
        c_out,
        kh,
        kw,
        stride,
        pad,
        ..
    } = *op
    else {
        debug_assert!(false, "conv2d called with {}", op.name());
        return;
    };
    let [c_in, h, w, c_out, kh, kw, stride, pad, oh, ow] =
        [c_in, h, w, c_out, kh, kw, stride, pad, oh, ow].map(|v| v as usize);
    let out_plane = oh * ow;
    for (xn, yn) in x
        .chunks_exact(c_in * h * w)
        .zip(y.chunks_exact_mut(c_out * out_plane))
    {
        for (co, yc) in yn.chunks_exact_mut(out_plane).enumerate() {
            let wc = &weight[co * c_in * kh * kw..(co + 1) * c_in * kh * kw];
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0.0f32;
                    for ci in 0..c_in {
                        for ky in 0..kh {
                            // Input row, in padded coordinates shifted back by `pad`.
                            let iy = (oy * stride + ky).wrapping_sub(pad);
                            if iy >= h {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = (ox * stride + kx).wrapping_sub(pad);
                                if ix >= w {
                                    continue;
                                }
                                acc += xn[(ci * h + iy) * w + ix] * wc[(ci * kh + ky) * kw + kx];
                            }
                        }
                    }
                    yc[oy * ow + ox] = acc + bias.map_or(0.0, |b| b[co]);
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
    let mut o = 0;
    for i0 in 0..out_dims[0] {
        for i1 in 0..out_dims[1] {
            for i2 in 0..out_dims[2] {
                let base = i0 * s[0] + i1 * s[1] + i2 * s[2];
                for i3 in 0..out_dims[3] {
                    y[o] = x[base + i3 * s[3]];
                    o += 1;
                }
            }
        }
    }
}
