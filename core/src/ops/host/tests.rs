//! Tests of the host reference: each op against hand-computed values or an independent naive
//! loop written straight from the op's definition in `ops.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use proptest::prelude::*;

use super::*;
use crate::Error;

/// Deterministic pseudo-random values in [-1, 1) (an LCG; tests need no RNG crate).
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs `op` on f32 inputs (u32 operands passed as their bit patterns) and returns the output.
fn run_f32(op: &Op, inputs: &[&[f32]]) -> Vec<f32> {
    let sig = op.signature().expect("valid op");
    let bytes: Vec<&[u8]> = inputs.iter().map(|x| bytemuck::cast_slice(x)).collect();
    let mut out = vec![0f32; sig.outputs[0].len as usize];
    run(op, &bytes, &mut [bytemuck::cast_slice_mut(&mut out)]).expect("run");
    out
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn matmul_op(
    batch: u32,
    m: u32,
    n: u32,
    k: u32,
    trans_a: bool,
    trans_b: bool,
    broadcast_b: bool,
    bias: bool,
    alpha: f32,
) -> Op {
    Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
        bias,
        alpha,
        weight_format: WeightFormat::F32,
    }
}

/// The naive triple loop, indexing the operands in their stored layouts, in f64. Returns the
/// products and, per element, the rounding bound an f32 sum of `k` terms can reach in any order
/// (with or without FMA): `(k + 2)·ε·(|alpha|·Σ|a·b| + |bias|)`, the classic dot-product bound.
fn naive_matmul(op: &Op, a: &[f32], b: &[f32], bias: Option<&[f32]>) -> (Vec<f32>, Vec<f32>) {
    let Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
        alpha,
        ..
    } = *op
    else {
        unreachable!()
    };
    let (batch, m, n, k) = (batch as usize, m as usize, n as usize, k as usize);
    let mut c = vec![0f32; batch * m * n];
    let mut bound = vec![0f32; batch * m * n];
    for bi in 0..batch {
        let bb = if broadcast_b { 0 } else { bi };
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut mag) = (0f64, 0f64);
                for p in 0..k {
                    let av = if trans_a {
                        a[bi * m * k + p * m + i]
                    } else {
                        a[bi * m * k + i * k + p]
                    };
                    let bv = if trans_b {
                        b[bb * k * n + j * k + p]
                    } else {
                        b[bb * k * n + p * n + j]
                    };
                    acc += f64::from(av) * f64::from(bv);
                    mag += (f64::from(av) * f64::from(bv)).abs();
                }
                let bias_v = bias.map_or(0.0, |b| f64::from(b[j]));
                let alpha = f64::from(alpha);
                c[(bi * m + i) * n + j] = (alpha * acc + bias_v) as f32;
                bound[(bi * m + i) * n + j] =
                    ((k + 2) as f64 * f64::from(f32::EPSILON) * (alpha.abs() * mag + bias_v.abs()))
                        as f32;
            }
        }
    }
    (c, bound)
}

/// Asserts `got` is within the f32 rounding bound of the exact product.
fn assert_within_bound(got: &[f32], (want, bound): &(Vec<f32>, Vec<f32>), what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((&g, &w), &e)) in got.iter().zip(want).zip(bound).enumerate() {
        assert!(
            (g - w).abs() <= e + f32::EPSILON * w.abs(),
            "{what}: element {i}: got {g}, exact {w}, bound {e}"
        );
    }
}

#[test]
fn matmul_hand_computed() {
    let op = matmul_op(1, 2, 2, 2, false, false, false, false, 1.0);
    let c = run_f32(&op, &[&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]]);
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    // Linear: x [1, 2] · Wᵀ with W [3, 2], bias, alpha 2.
    let op = matmul_op(1, 1, 3, 2, false, true, true, true, 2.0);
    let c = run_f32(
        &op,
        &[
            &[1.0, 2.0],
            &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
            &[0.5, 0.25, -1.0],
        ],
    );
    assert_eq!(c, [2.5, 4.25, 5.0]);
}

/// Every transpose combination, with and without broadcast, bias and alpha, on shapes that cross
/// sgemm's micro-kernel and cache blocks, the dot kernel's blocks and row chunks, and (the larger
/// ones) the threaded tiling: each element
/// must be within f32 rounding of the exact product.
#[test]
fn matmul_all_layouts_match_naive_loop() {
    for &(batch, m, n, k) in &[
        (2, 7, 300, 150),
        (3, 4, 5, 3),
        (1, 1, 1, 1),
        (2, 9, 17, 260),
        (1, 130, 97, 40),
        (3, 70, 65, 33),
        // The dot kernel over several row chunks, with edge rows, columns and a `k` tail.
        (1, 130, 6, 1001),
    ] {
        for flags in 0..16u32 {
            let (ta, tb, bc, bias) = (
                flags & 1 != 0,
                flags & 2 != 0,
                flags & 4 != 0,
                flags & 8 != 0,
            );
            let alpha = if flags % 3 == 0 { 1.0 } else { 0.125 };
            let op = matmul_op(batch, m, n, k, ta, tb, bc, bias, alpha);
            let sig = op.signature().unwrap();
            let a = data(sig.inputs[0].len as usize, 1);
            let b = data(sig.inputs[1].len as usize, 2);
            let bias_v = data(n as usize, 3);
            let mut inputs: Vec<&[f32]> = vec![&a, &b];
            if bias {
                inputs.push(&bias_v);
            }
            let got = run_f32(&op, &inputs);
            let want = naive_matmul(&op, &a, &b, bias.then_some(&bias_v[..]));
            assert_within_bound(&got, &want, &format!("{op:?}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn matmul_random_shapes_match_naive_loop(
        batch in 1u32..3, m in 1u32..20, n in 1u32..40, k in 1u32..40, flags in 0u32..16, seed: u64,
    ) {
        let (ta, tb, bc, bias) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0, flags & 8 != 0);
        let op = matmul_op(batch, m, n, k, ta, tb, bc, bias, 0.5);
        let sig = op.signature().unwrap();
        let a = data(sig.inputs[0].len as usize, seed);
        let b = data(sig.inputs[1].len as usize, seed ^ 1);
        let bias_v = data(n as usize, seed ^ 2);
        let mut inputs: Vec<&[f32]> = vec![&a, &b];
        if bias {
            inputs.push(&bias_v);
        }
        let got = run_f32(&op, &inputs);
        let (want, bound) = naive_matmul(&op, &a, &b, bias.then_some(&bias_v[..]));
        for ((&g, &w), &e) in got.iter().zip(&want).zip(&bound) {
            prop_assert!((g - w).abs() <= e + f32::EPSILON * w.abs(), "got {}, exact {}", g, w);
        }
    }
}

/// The threaded paths (tiled matmul, row-chunked element-wise and row ops) must give bit-identical
/// results on one thread and on many: chunking never changes how an element is computed.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let ops = [
        matmul_op(1, 256, 384, 384, false, true, true, true, 1.0),
        matmul_op(24, 40, 40, 32, false, true, false, false, 0.25),
        Op::Gelu { len: 200_000 },
        Op::Add {
            len: 196_608,
            b_len: 384,
        },
        Op::LayerNorm {
            rows: 512,
            cols: 384,
            eps: 1e-12,
        },
        Op::Softmax {
            rows: 2048,
            cols: 64,
            masked: true,
            rows_per_mask: 512,
        },
        Op::Conv2d {
            n: 2,
            c_in: 32,
            h: 14,
            w: 14,
            c_out: 64,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            bias: true,
            weight_format: WeightFormat::F32,
        },
    ];
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let four = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for (i, op) in ops.iter().enumerate() {
        let sig = op.signature().unwrap();
        let inputs: Vec<Vec<f32>> = sig
            .inputs
            .iter()
            .enumerate()
            .map(|(j, t)| {
                let v = data(t.len as usize, 50 + (i * 8 + j) as u64);
                // Softmax masks: drop every third column.
                if matches!(op, Op::Softmax { .. }) && j == 1 {
                    (0..v.len()).map(|c| f32::from(c % 3 != 0)).collect()
                } else {
                    v
                }
            })
            .collect();
        let refs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let serial = one.install(|| run_f32(op, &refs));
        let threaded = four.install(|| run_f32(op, &refs));
        assert!(
            serial
                .iter()
                .zip(&threaded)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{op:?}: 1 and 4 threads differ"
        );
    }
    // And the large matmul is still right.
    let op = &ops[0];
    let sig = op.signature().unwrap();
    let (a, b, bias) = (
        data(sig.inputs[0].len as usize, 50),
        data(sig.inputs[1].len as usize, 51),
        data(sig.inputs[2].len as usize, 52),
    );
    let got = four.install(|| run_f32(op, &[&a, &b, &bias]));
    assert_within_bound(&got, &naive_matmul(op, &a, &b, Some(&bias)), "large linear");
}

#[test]
fn elementwise_ops() {
    let a = [1.0, -2.0, 3.0, -4.0, 5.0, -6.0];
    let c = run_f32(&Op::Add { len: 6, b_len: 3 }, &[&a, &[10.0, 20.0, 30.0]]);
    assert_eq!(c, [11.0, 18.0, 33.0, 6.0, 25.0, 24.0]);
    let c = run_f32(&Op::Add { len: 6, b_len: 6 }, &[&a, &a]);
    assert_eq!(c, [2.0, -4.0, 6.0, -8.0, 10.0, -12.0]);
    let c = run_f32(&Op::Mul { len: 6, b_len: 2 }, &[&a, &[2.0, -1.0]]);
    assert_eq!(c, [2.0, 2.0, 6.0, 4.0, 10.0, 6.0]);
    let c = run_f32(
        &Op::Scale {
            len: 6,
            alpha: -0.5,
        },
        &[&a],
    );
    assert_eq!(c, [-0.5, 1.0, -1.5, 2.0, -2.5, 3.0]);
    let c = run_f32(&Op::Relu { len: 6 }, &[&a]);
    assert_eq!(c, [1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
    let c = run_f32(&Op::Relu { len: 1 }, &[&[f32::NAN]]);
    assert!(c[0].is_nan(), "relu keeps NaN as PyTorch does");
    let bits = [7u32, 0xffff_ffff, 0x3f80_0000];
    let x: &[f32] = bytemuck::cast_slice(&bits);
    let y = run_f32(&Op::Copy { len: 3 }, &[x]);
    assert_eq!(bytemuck::cast_slice::<f32, u32>(&y), bits);
}

/// Reference erf in f64 from the all-positive series
/// `erf(x) = 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3·…·(2n+1))` (no cancellation).
fn erf_f64(x: f64) -> f64 {
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-18 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
}

#[test]
fn erf_is_accurate_to_about_one_ulp() {
    let mut worst = 0f64;
    for i in -60_000..=60_000 {
        let x = i as f32 * 1e-4;
        let want = erf_f64(f64::from(x));
        let got = f64::from(erf(x));
        // Error in units of the f32 spacing at the true value.
        let ulp = f64::from(f32::EPSILON) * want.abs().max(f64::from(f32::MIN_POSITIVE));
        let ulp = ulp.max(f64::from(f32::EPSILON) * 2f64.powi(-24));
        worst = worst.max((got - want).abs() / ulp);
    }
    assert!(worst < 2.0, "worst error {worst} ulp");
    assert_eq!(erf(0.0), 0.0);
    assert_eq!(erf(f32::INFINITY), 1.0);
    assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    assert_eq!(erf(10.0), 1.0);
    assert!(erf(f32::NAN).is_nan());
    assert!((erf(1e-30) - 1.128_379_2e-30).abs() < 1e-36);
}

#[test]
fn gelu_known_values() {
    let x = [1.0, -1.0, 0.0, 2.0, -3.0, 0.5, -10.0, 10.0];
    let y = run_f32(&Op::Gelu { len: 8 }, &[&x]);
    // torch.nn.functional.gelu in float32.
    let want = [
        0.841_344_7,
        -0.158_655_3,
        0.0,
        1.954_499_8,
        -0.004_049_71,
        0.345_731_1,
        0.0,
        10.0,
    ];
    assert_close(&y, &want, 2e-7);
    for (&x, &y) in x.iter().zip(&y) {
        let exact = 0.5 * f64::from(x) * (1.0 + erf_f64(f64::from(x) / 2f64.sqrt()));
        assert!(
            (f64::from(y) - exact).abs() < 3e-7 * (1.0 + exact.abs()),
            "gelu({x})"
        );
    }
}

#[test]
fn softmax_rows_sum_to_one_and_mask_drops_columns() {
    let y = run_f32(
        &Op::Softmax {
            rows: 1,
            cols: 2,
            masked: false,
            rows_per_mask: 1,
        },
        &[&[0.0, 3f32.ln()]],
    );
    assert_close(&y, &[0.25, 0.75], 1e-7);

    let (rows, cols) = (6u32, 37u32);
    let x: Vec<f32> = data((rows * cols) as usize, 7)
        .iter()
        .map(|v| v * 30.0)
        .collect();
    let plain = run_f32(
        &Op::Softmax {
            rows,
            cols,
            masked: false,
            rows_per_mask: 1,
        },
        &[&x],
    );
    for row in plain.chunks(cols as usize) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(row.iter().all(|&v| v > 0.0));
    }
    // 3 mask rows, each shared by 2 rows; the last mask row drops everything.
    let mut mask = vec![1f32; 3 * cols as usize];
    mask[0] = 0.0;
    mask[5] = 0.0;
    mask[cols as usize + 36] = 0.0;
    mask[2 * cols as usize..].fill(0.0);
    let op = Op::Softmax {
        rows,
        cols,
        masked: true,
        rows_per_mask: 2,
    };
    let y = run_f32(&op, &[&x, &mask]);
    for (r, row) in y.chunks(cols as usize).enumerate() {
        let mrow = &mask[r / 2 * cols as usize..][..cols as usize];
        for (j, (&v, &m)) in row.iter().zip(mrow).enumerate() {
            if m == 0.0 {
                assert_eq!(v, 0.0, "row {r} col {j} is masked");
            } else {
                assert!(v > 0.0);
            }
        }
        let sum: f32 = row.iter().sum();
        if r < 4 {
            assert!((sum - 1.0).abs() < 1e-6, "row {r} sums to {sum}");
        } else {
            assert_eq!(sum, 0.0, "fully masked row {r}");
        }
    }
    // Masked columns do not influence kept ones: equal to the softmax of the kept subset.
    let kept: Vec<f32> = x[1..5].iter().chain(&x[6..37]).copied().collect();
    let sub = run_f32(
        &Op::Softmax {
            rows: 1,
            cols: 35,
            masked: false,
            rows_per_mask: 1,
        },
        &[&kept],
    );
    let got: Vec<f32> = y[1..5].iter().chain(&y[6..37]).copied().collect();
    assert_close(&got, &sub, 1e-6);
}

#[test]
fn layer_norm_gives_zero_mean_unit_variance_then_affine() {
    let (rows, cols) = (3u32, 384u32);
    let x: Vec<f32> = data((rows * cols) as usize, 11)
        .iter()
        .map(|v| v * 5.0 + 2.0)
        .collect();
    let ones = vec![1f32; cols as usize];
    let zeros = vec![0f32; cols as usize];
    let op = Op::LayerNorm {
        rows,
        cols,
        eps: 1e-12,
    };
    let y = run_f32(&op, &[&x, &ones, &zeros]);
    for row in y.chunks(cols as usize) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / f64::from(cols);
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / f64::from(cols);
        assert!(mean.abs() < 1e-6, "mean {mean}");
        assert!((var - 1.0).abs() < 1e-5, "var {var}");
    }
    // Hand-computed: [1, 2, 3] has mean 2, variance 2/3.
    let op = Op::LayerNorm {
        rows: 1,
        cols: 3,
        eps: 0.0,
    };
    let y = run_f32(
        &op,
        &[&[1.0, 2.0, 3.0], &[2.0, 1.0, 1.0], &[0.0, 5.0, -1.0]],
    );
    let s = 1.5f32.sqrt();
    assert_close(&y, &[-2.0 * s, 5.0, s - 1.0], 1e-6);
}

#[test]
fn embedding_gathers_rows_and_zeroes_out_of_range_ids() {
    let table = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let ids = [2u32, 0, 3, u32::MAX, 1];
    let op = Op::Embedding {
        vocab: 3,
        dim: 2,
        rows: 5,
        weight_format: WeightFormat::F32,
    };
    let y = run_f32(&op, &[&table, bytemuck::cast_slice(&ids)]);
    assert_eq!(y, [5.0, 6.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0]);
}

#[test]
fn mean_pool_weights_by_mask() {
    // batch 2, seq 3, dim 2.
    let x = [
        1.0, 2.0, 3.0, 4.0, 100.0, 100.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
    ];
    let mask = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let op = Op::MeanPool {
        batch: 2,
        seq: 3,
        dim: 2,
    };
    let y = run_f32(&op, &[&x, &mask]);
    // Second batch row is fully masked: 0 / 1e-9 = 0.
    assert_eq!(y, [2.0, 3.0, 0.0, 0.0]);
    let y = run_f32(&op, &[&x, &[0.0, 1.0, 1.0, 1.0, 1.0, 1.0]]);
    assert_eq!(y, [51.5, 52.0, 7.0, 8.0]);
}

#[test]
fn l2_normalize_gives_unit_rows_and_respects_eps() {
    let op = Op::L2Normalize {
        rows: 3,
        cols: 2,
        eps: 1e-12,
    };
    let y = run_f32(&op, &[&[3.0, 4.0, 0.0, 0.0, -1e-3, 0.0]]);
    assert_close(&y, &[0.6, 0.8, 0.0, 0.0, -1.0, 0.0], 1e-7);
    let op = Op::L2Normalize {
        rows: 1,
        cols: 2,
        eps: 10.0,
    };
    assert_eq!(run_f32(&op, &[&[3.0, 4.0]]), [0.3, 0.4]);
}

/// Naive convolution over an explicitly zero-padded copy of the input.
fn naive_conv(op: &Op, x: &[f32], wt: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let Op::Conv2d {
        n,
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
        unreachable!()
    };
    let [n, c_in, h, w, c_out, kh, kw, stride, pad] =
        [n, c_in, h, w, c_out, kh, kw, stride, pad].map(|v| v as usize);
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
    let op = Op::Conv2d {
        n: 1,
        c_in: 1,
        h: 3,
        w: 3,
        c_out: 1,
        kh: 2,
        kw: 2,
        stride: 1,
        pad: 0,
        bias: false,
        weight_format: WeightFormat::F32,
    };
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
    let op = Op::MaxPool2d {
        n: 1,
        c: 2,
        h: 4,
        w: 4,
        k: 2,
        stride: 2,
    };
    let mut x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    x.extend((0..16).map(|v| -(v as f32)));
    let y = run_f32(&op, &[&x]);
    assert_eq!(y, [5.0, 7.0, 13.0, 15.0, 0.0, -2.0, -8.0, -10.0]);
    // Overlapping windows (k 3, stride 1) on a 1x1x3x4 input.
    let op = Op::MaxPool2d {
        n: 1,
        c: 1,
        h: 3,
        w: 4,
        k: 3,
        stride: 1,
    };
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

#[test]
fn unaligned_operands_give_the_same_result() {
    let op = matmul_op(2, 3, 5, 4, true, false, false, true, 1.5);
    let sig = op.signature().unwrap();
    let (a, b, bias) = (data(24, 31), data(40, 32), data(5, 33));
    let aligned = run_f32(&op, &[&a, &b, &bias]);
    // Shift every operand by one byte inside a larger buffer.
    let shifted = |v: &[f32]| {
        let mut buf = vec![0u8; v.len() * 4 + 1];
        buf[1..].copy_from_slice(bytemuck::cast_slice(v));
        buf
    };
    let (sa, sb, sbias) = (shifted(&a), shifted(&b), shifted(&bias));
    let mut out = vec![0u8; sig.outputs[0].size() as usize + 1];
    run(
        &op,
        &[&sa[1..], &sb[1..], &sbias[1..]],
        &mut [&mut out[1..]],
    )
    .unwrap();
    let got: Vec<f32> = out[1..]
        .chunks_exact(4)
        .map(bytemuck::pod_read_unaligned)
        .collect();
    assert_eq!(got, aligned);
}

#[test]
fn bad_operands_are_errors_naming_the_operand() {
    let op = Op::LayerNorm {
        rows: 2,
        cols: 4,
        eps: 1e-5,
    };
    let x = [0u8; 32];
    let g = [0u8; 16];
    let mut y = [0u8; 32];
    match run(&op, &[&x, &g], &mut [&mut y]) {
        Err(Error::BindingCount {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (4, 3)),
        other => panic!("expected BindingCount, got {other:?}"),
    }
    match run(&op, &[&x, &g, &g[..12]], &mut [&mut y]) {
        Err(Error::BindingSize {
            operand,
            expected,
            actual,
            ..
        }) => {
            assert_eq!(operand, "beta");
            assert_eq!((expected, actual), (16, 12));
        }
        other => panic!("expected BindingSize, got {other:?}"),
    }
    match run(&op, &[&x, &g, &g], &mut [&mut y[..31]]) {
        Err(Error::BindingSize { operand, .. }) => assert_eq!(operand, "y"),
        other => panic!("expected BindingSize, got {other:?}"),
    }
    let bad = Op::Add { len: 5, b_len: 2 };
    assert!(matches!(
        run(&bad, &[&[0u8; 20], &[0u8; 8]], &mut [&mut [0u8; 20]]),
        Err(Error::InvalidArgument(_))
    ));
    let bad = Op::Permute {
        dims: [1, 1, 1, 1],
        perm: [0, 0, 1, 2],
    };
    assert!(matches!(
        run(&bad, &[&[0u8; 4]], &mut [&mut [0u8; 4]]),
        Err(Error::InvalidArgument(_))
    ));
}

/// Guards the f64 row sums: a plain f32 running sum over a long row with a large offset drifts by
/// ~1e-3 relative here, and the reference must stay within f32 rounding of the exact value.
#[test]
fn long_rows_with_large_offset_stay_accurate() {
    let cols = 65_536u32;
    let x: Vec<f32> = data(cols as usize, 41).iter().map(|v| 1000.0 + v).collect();
    let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let mean = xs.iter().sum::<f64>() / f64::from(cols);
    let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / f64::from(cols);
    let op = Op::LayerNorm {
        rows: 1,
        cols,
        eps: 1e-12,
    };
    let ones = vec![1f32; cols as usize];
    let zeros = vec![0f32; cols as usize];
    let y = run_f32(&op, &[&x, &ones, &zeros]);
    for (i, (&yv, &xv)) in y.iter().zip(&xs).enumerate().step_by(97) {
        let want = (xv - mean) / var.sqrt();
        assert!(
            (f64::from(yv) - want).abs() < 1e-3 * (1.0 + want.abs()) / 16.0,
            "{i}: {yv} vs {want}"
        );
    }
    let op = Op::L2Normalize {
        rows: 1,
        cols,
        eps: 1e-12,
    };
    let y = run_f32(&op, &[&x]);
    let norm = xs.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((f64::from(y[0]) - xs[0] / norm).abs() < 1e-7 * (xs[0] / norm));
    let op = Op::Softmax {
        rows: 1,
        cols,
        masked: false,
        rows_per_mask: 1,
    };
    let y = run_f32(&op, &[&vec![0.5f32; cols as usize]]);
    assert!(
        (y[0] - 1.0 / cols as f32).abs() < 1e-7 / cols as f32 * 4.0,
        "{}",
        y[0]
    );
}
