//! Matrix products against hand-computed values and the naive triple loop, in every layout.

use proptest::prelude::*;

use super::*;

#[test]
fn matmul_hand_computed() {
    let op = Op::matmul((1, 2, 2, 2), false, false, false, false, 1.0);
    let c = run_f32(&op, &[&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]]);
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    // Linear: x [1, 2] · Wᵀ with W [3, 2], bias, alpha 2.
    let op = Op::matmul((1, 1, 3, 2), false, true, true, true, 2.0);
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
            let op = Op::matmul((batch, m, n, k), ta, tb, bc, bias, alpha);
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
        let op = Op::matmul((batch, m, n, k), ta, tb, bc, bias, 0.5);
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

/// A product over its rows in parts (a graph tiled by rows) against the whole product: where
/// `rows_split_exact` says the split keeps each row's arithmetic, every bit matches; where the
/// parts would switch kernels (sgemm for the whole, the dot kernel for short parts), the bits
/// differ, so the predicate is what keeps tiled graphs bit-identical.
#[test]
fn rows_split_exact_says_when_a_product_over_fewer_rows_keeps_the_bits() {
    let parts_of = |op: &Op, a: &[f32], b: &[f32], bias: &[f32], rows: u32| -> Vec<f32> {
        let Op::MatMul { m, n, k, .. } = *op else {
            unreachable!()
        };
        let part = op.restricted(rows);
        let (k, n) = (k as usize, n as usize);
        let mut out = Vec::new();
        for i in 0..(m / rows) as usize {
            let rows = rows as usize;
            out.extend(run_f32(
                &part,
                &[&a[i * rows * k..(i + 1) * rows * k], b, bias],
            ));
        }
        assert_eq!(out.len(), m as usize * n);
        out
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut differed = false;
    // (rows, n, k, alpha): a down-projection (`k` beyond the dot kernel's long-`k` limit), an
    // up-projection (short `k`), and a scaled product.
    for &(m, n, k, alpha) in &[
        (512u32, 48u32, 640u32, 1.0f32),
        (512, 96, 64, 1.0),
        (512, 48, 200, 1.0),
        (512, 48, 40, 0.125),
    ] {
        let op = Op::matmul((1, m, n, k), false, true, true, true, alpha);
        let (a, b, bias) = (
            data((m * k) as usize, 5),
            data((n * k) as usize, 6),
            data(n as usize, 7),
        );
        let whole = bits(&run_f32(&op, &[&a, &b, &bias]));
        for rows in [256u32, 128, 64, 8] {
            let got = bits(&parts_of(&op, &a, &b, &bias, rows));
            if op.rows_split_exact(rows) {
                assert_eq!(got, whole, "{op:?} over {rows} rows a part");
            } else {
                differed |= got != whole;
            }
        }
    }
    assert!(
        differed,
        "no split the predicate refuses changed a bit: the test proves nothing"
    );
    // Products whose units are whole matrices keep their rows.
    let batched = Op::matmul((4, 64, 8, 640), false, true, false, false, 0.5);
    assert!(batched.rows_split_exact(1));
    // Other ops compute each element on its own.
    assert!(Op::Gelu { len: 16 }.rows_split_exact(1));
}
