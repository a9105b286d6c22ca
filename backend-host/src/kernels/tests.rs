//! Tests of the host reference: each op against hand-computed values or an independent naive
//! loop written straight from the op's definition in `ops.rs`.

use super::*;
use crate::Error;
use crate::samples::support::assert_close;

mod elementwise;
mod matmul;
mod rows;
mod spatial;

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

/// The threaded paths (tiled matmul, row-chunked element-wise and row ops) must give bit-identical
/// results on one thread and on many: chunking never changes how an element is computed.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let ops = [
        Op::matmul((1, 256, 384, 384), false, true, true, true, 1.0),
        Op::matmul((24, 40, 40, 32), false, true, false, false, 0.25),
        Op::Gelu { len: 200_000 },
        Op::Add {
            len: 196_608,
            b_len: 384,
        },
        Op::Add {
            len: 100_000,
            b_len: 100_000,
        },
        Op::SiluMul { len: 50_000 },
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
        Op::conv2d((2, 32, 14, 14), 64, (3, 3), 1, 1, true),
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
    // A full-length add, split by elements, is still `a + b`.
    let (a, b) = (data(100_000, 60), data(100_000, 61));
    let got = four.install(|| run_f32(&ops[4], &[&a, &b]));
    assert!(
        got.iter()
            .zip(a.iter().zip(&b))
            .all(|(c, (a, b))| *c == a + b)
    );
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
fn unaligned_operands_give_the_same_result() {
    let op = Op::matmul((2, 3, 5, 4), true, false, false, true, 1.5);
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
        Err(Error::Argument(crate::ArgumentError::NotMultiple {
            value: 5,
            divisor: 2,
            ..
        }))
    ));
    let bad = Op::Permute {
        dims: [1, 1, 1, 1],
        perm: [0, 0, 1, 2],
    };
    assert!(matches!(
        run(&bad, &[&[0u8; 4]], &mut [&mut [0u8; 4]]),
        Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
    ));
}
