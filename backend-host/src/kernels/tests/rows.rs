//! Row-wise ops (softmax, layer norm, embedding, mean pooling, L2 normalisation) against
//! hand-computed values, and the accuracy of long rows.

use super::*;

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
