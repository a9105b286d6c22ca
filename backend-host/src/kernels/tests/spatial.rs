//! Convolution, max pooling and permutation against naive loops and index arithmetic.

use super::*;

/// Naive convolution over an explicitly zero-padded copy of the input.
fn naive_conv(op: &Op, x: &[f32], wt: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let [n, c_in, h, w, c_out, kh, kw, stride, pad] = op.conv2d_dims().unwrap().map(|v| v as usize);
    let (ph, pw) = (h + 2 * pad, w + 2 * pad);
    let mut padded = vec![0f32; n * c_in * ph * pw];
    for b in 0..n * c_in {
        for y in 0..h {
            for xx in 0..w {
                padded[(b * ph + y + pad) * pw + xx + pad] = x[(b * h + y) * w + xx];
            }
        }
    }
    let (oh, ow) = ((ph - kh) / stride + 1, (pw - kw) / stride + 1);
    let mut out = Vec::new();
    for b in 0..n {
        for co in 0..c_out {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0f32;
                    for ci in 0..c_in {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                acc += padded[((b * c_in + ci) * ph + oy * stride + ky) * pw
                                    + ox * stride
                                    + kx]
                                    * wt[((co * c_in + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    out.push(acc + bias.map_or(0.0, |bv| bv[co]));
                }
            }
        }
    }
    out
}

#[test]
fn conv2d_matches_naive_padded_loop() {
    // Hand-computed: 3x3 input, 2x2 ones kernel, no pad, stride 1.
    let op = Op::conv2d((1, 1, 3, 3), 1, (2, 2), 1, 0, false);
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    assert_eq!(run_f32(&op, &[&x, &[1.0; 4]]), [12.0, 16.0, 24.0, 28.0]);

    for &(stride, pad, bias) in &[
        (1, 1, true),
        (2, 1, false),
        (2, 0, true),
        (3, 2, true),
        (1, 0, false),
    ] {
        let op = Op::Conv2d {
            n: 2,
            c_in: 3,
            h: 7,
            w: 6,
            c_out: 4,
            kh: 3,
            kw: 2,
            stride,
            pad,
            bias,
            weight_format: WeightFormat::F32,
        };
        let sig = op.signature().unwrap();
        let x = data(sig.inputs[0].len as usize, 21);
        let wt = data(sig.inputs[1].len as usize, 22);
        let b = data(4, 23);
        let mut inputs: Vec<&[f32]> = vec![&x, &wt];
        if bias {
            inputs.push(&b);
        }
        let got = run_f32(&op, &inputs);
        assert_close(
            &got,
            &naive_conv(&op, &x, &wt, bias.then_some(&b[..])),
            1e-6,
        );
    }
}

#[test]
fn max_pool_takes_window_maxima() {
    let op = Op::max_pool2d((1, 2, 4, 4), 2, 2);
    let mut x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    x.extend((0..16).map(|v| -(v as f32)));
    let y = run_f32(&op, &[&x]);
    assert_eq!(y, [5.0, 7.0, 13.0, 15.0, 0.0, -2.0, -8.0, -10.0]);
    // Overlapping windows (k 3, stride 1) on a 1x1x3x4 input.
    let op = Op::max_pool2d((1, 1, 3, 4), 3, 1);
    let x = [1.0, 9.0, 2.0, 0.0, 3.0, 4.0, 5.0, 11.0, 6.0, 7.0, 8.0, 1.0];
    assert_eq!(run_f32(&op, &[&x]), [9.0, 11.0]);
}

#[test]
fn permute_all_24_permutations_match_index_math() {
    let dims = [2u32, 3, 4, 5];
    let x: Vec<f32> = (0..120).map(|v| v as f32).collect();
    let mut count = 0;
    for p0 in 0..4u8 {
        for p1 in 0..4u8 {
            for p2 in 0..4u8 {
                for p3 in 0..4u8 {
                    let perm = [p0, p1, p2, p3];
                    let op = Op::Permute { dims, perm };
                    if op.signature().is_err() {
                        continue;
                    }
                    count += 1;
                    let y = run_f32(&op, &[&x]);
                    let od = Op::permuted_dims(dims, perm);
                    let mut o = 0;
                    for a in 0..od[0] {
                        for b in 0..od[1] {
                            for c in 0..od[2] {
                                for d in 0..od[3] {
                                    let mut idx = [0u32; 4];
                                    for (axis, v) in [a, b, c, d].into_iter().enumerate() {
                                        idx[perm[axis] as usize] = v;
                                    }
                                    let src = ((idx[0] * dims[1] + idx[1]) * dims[2] + idx[2])
                                        * dims[3]
                                        + idx[3];
                                    assert_eq!(y[o], src as f32, "perm {perm:?} at {o}");
                                    o += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(count, 24);
}
