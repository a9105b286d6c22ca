//! The host product on stored (f16, int8) weights against the reference it must match within f32
//! rounding: every weight element decoded on its own by [`WeightView::at`] (the per-element
//! decode the host used before panels), then the f32 product.

use proptest::prelude::*;

use super::super::{OutPtr, Shape};
use super::{Fused, Product};
use crate::kernels::run;
use crate::ops::quant::WeightView;
use crate::ops::{Op, WeightFormat};

/// Deterministic pseudo-random 64-bit values (an LCG; tests need no RNG crate).
fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        s >> 16
    }
}

/// Values in [-1, 1).
fn floats(len: usize, seed: u64) -> Vec<f32> {
    let mut next = lcg(seed);
    (0..len)
        .map(|_| (next() % (1 << 24)) as f32 / (1 << 23) as f32 - 1.0)
        .collect()
}

/// The stored bytes of a weight operand of `len` elements in `format`, padded to whole words:
/// any int8 byte (−128 included: the kernels must not assume `quantize`'s range), or any finite
/// half (subnormals included).
fn stored_bytes(len: usize, format: WeightFormat, seed: u64) -> Vec<u8> {
    let mut next = lcg(seed);
    let mut bytes = match format {
        WeightFormat::F16 => (0..len)
            .flat_map(|_| {
                let h = next() as u16;
                // Exponent 31 (infinity, NaN) becomes 30: weights are finite.
                let h = if h & 0x7c00 == 0x7c00 { h & !0x0400 } else { h };
                h.to_le_bytes()
            })
            .collect(),
        _ => (0..len).map(|_| next() as u8).collect::<Vec<u8>>(),
    };
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    bytes
}

/// The product `op` (weight in its stored format) on the host, the reference (`b` decoded
/// element by element in the op's layout, then the f32 op), and per output the largest difference
/// two f32 sums of the same `k` products may have in any order, with or without FMA:
/// `2·(k + 2)·ε·(|alpha|·Σ|a·b| + |bias|)` (twice the classic dot-product bound).
fn stored_and_reference(op: &Op, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
        alpha,
        bias,
        weight_format: format,
        ..
    } = *op
    else {
        unreachable!("a matmul")
    };
    let sig = op.signature().unwrap();
    let a = floats(sig.inputs[0].len as usize, seed);
    let b_len = sig.inputs[1].len as usize;
    let b = stored_bytes(b_len, format, seed + 1);
    let (n, k) = (n as usize, k as usize);
    let channels = b_len / k;
    let (_, groups) = format.groups(k as u64);
    let scales: Vec<f32> = floats(channels * groups as usize, seed + 2)
        .iter()
        .map(|s| s.abs() / 64.0 + 1e-3)
        .collect();
    let bias_values = floats(n, seed + 3);

    let mut inputs: Vec<&[u8]> = vec![bytemuck::cast_slice(&a), &b];
    if format.has_scales() {
        inputs.push(bytemuck::cast_slice(&scales));
    }
    if bias {
        inputs.push(bytemuck::cast_slice(&bias_values));
    }
    let mut got = vec![0f32; sig.outputs[0].len as usize];
    run(op, &inputs, &mut [bytemuck::cast_slice_mut(&mut got)]).unwrap();

    let view =
        WeightView::new(&b, &scales, b_len as u64, channels as u64, k as u64, format).unwrap();
    let decoded: Vec<f32> = (0..b_len)
        .map(|e| {
            let (mat, r) = (e / (k * n), e % (k * n));
            let (j, p) = if trans_b {
                (r / k, r % k)
            } else {
                (r % n, r / n)
            };
            view.at(e, mat * n + j, p)
        })
        .collect();
    let f32_op = op.with_weight_format(WeightFormat::F32);
    let mut inputs: Vec<&[u8]> = vec![bytemuck::cast_slice(&a), bytemuck::cast_slice(&decoded)];
    if bias {
        inputs.push(bytemuck::cast_slice(&bias_values));
    }
    let mut want = vec![0f32; got.len()];
    run(&f32_op, &inputs, &mut [bytemuck::cast_slice_mut(&mut want)]).unwrap();

    let (batch, m) = (batch as usize, m as usize);
    let mut bound = vec![0f32; got.len()];
    for mat in 0..batch {
        let bm = if broadcast_b { 0 } else { mat };
        for i in 0..m {
            for j in 0..n {
                let sum: f64 = (0..k)
                    .map(|p| {
                        let av = if trans_a {
                            a[(mat * k + p) * m + i]
                        } else {
                            a[(mat * m + i) * k + p]
                        };
                        let bv = if trans_b {
                            decoded[(bm * n + j) * k + p]
                        } else {
                            decoded[(bm * k + p) * n + j]
                        };
                        f64::from(av * bv).abs()
                    })
                    .sum();
                let extra = if bias {
                    f64::from(bias_values[j].abs())
                } else {
                    0.0
                };
                let scale = 2.0 * (k as f64 + 2.0) * f64::from(f32::EPSILON);
                bound[(mat * m + i) * n + j] =
                    (scale * (f64::from(alpha.abs()) * sum + extra)) as f32;
            }
        }
    }
    (got, want, bound)
}

fn op(
    (batch, m, n, k): (u32, u32, u32, u32),
    trans_a: bool,
    trans_b: bool,
    broadcast_b: bool,
    bias: bool,
    format: WeightFormat,
) -> Op {
    Op::matmul((batch, m, n, k), trans_a, trans_b, broadcast_b, bias, 0.75)
        .with_weight_format(format)
}

/// Whether every output is within its bound of the reference.
fn within_rounding(got: &[f32], want: &[f32], bound: &[f32]) -> Result<(), String> {
    assert_eq!(got.len(), want.len());
    for (i, ((g, w), b)) in got.iter().zip(want).zip(bound).enumerate() {
        if (g - w).abs() > *b {
            return Err(format!("element {i}: {g} vs {w} (bound {b})"));
        }
    }
    Ok(())
}

/// Every layout and format, at shapes that run serially and on the pool (rows split across
/// tasks), with odd `k` and `n` (int8 rows straddling words), groups that do not divide `k`,
/// and `k` long enough that a panel is the minimum width.
#[test]
fn stored_matches_dequantized() {
    let formats = [
        WeightFormat::F16,
        WeightFormat::Int8 { group: 0 },
        WeightFormat::Int8 { group: 4 },
        WeightFormat::Int8 { group: 5 },
    ];
    let shapes = [
        (1, 1, 1, 1),
        (2, 3, 5, 7),
        (3, 17, 33, 9),
        (1, 300, 70, 130),
        (2, 65, 200, 97),
        (1, 4, 40, 9000),
    ];
    let mut seed = 1;
    for format in formats {
        for shape in shapes {
            for (trans_a, trans_b, broadcast_b) in [
                (false, true, true),
                (false, false, true),
                (true, true, true),
                (false, true, false),
                (true, false, false),
            ] {
                let bias = seed % 2 == 0;
                let op = op(shape, trans_a, trans_b, broadcast_b, bias, format);
                let (got, want, bound) = stored_and_reference(&op, seed);
                if let Err(e) = within_rounding(&got, &want, &bound) {
                    panic!("{op:?}: {e}");
                }
                seed += 1;
            }
        }
    }
}

/// f16 and int8 weights on the dot kernel's shapes (`[n, k]` weights, `k ≥ 128`) are read in
/// place and decoded as loaded (int8 a few rows at a time): every output equals, bit for bit,
/// the f32 product over the decoded weight, whose dot kernel sums in the same order (single rows
/// as in decoding, several rows, a batch of weights, a `k` with a tail, bias or none).
#[test]
fn read_in_place_equals_the_f32_product_bit_for_bit() {
    let shapes = [
        (1, 1, 576, 576),
        (1, 3, 200, 130),
        (2, 5, 70, 301),
        (1, 1, 49, 9000),
        (1, 300, 70, 130),
    ];
    let formats = [
        WeightFormat::F16,
        WeightFormat::Int8 { group: 0 },
        WeightFormat::Int8 { group: 5 },
        WeightFormat::Int8 { group: 32 },
    ];
    for format in formats {
        for (i, shape) in shapes.into_iter().enumerate() {
            for broadcast_b in [true, false] {
                let op = op(shape, false, true, broadcast_b, i % 2 == 0, format);
                let (got, want, _) = stored_and_reference(&op, 100 + i as u64);
                let differ = got
                    .iter()
                    .zip(&want)
                    .position(|(g, w)| g.to_bits() != w.to_bits());
                assert_eq!(differ, None, "{op:?}: {differ:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random shapes and layouts (row and column splits chosen differently from the f32 path's).
    #[test]
    fn random_shapes_match_dequantized(
        batch in 1u32..4,
        m in 1u32..90,
        n in 1u32..80,
        k in 1u32..300,
        flags in 0u8..16,
        format in prop_oneof![
            Just(WeightFormat::F16),
            (0u32..12).prop_map(|group| WeightFormat::Int8 { group }),
        ],
        seed in 0u64..1000,
    ) {
        let op = op(
            (batch, m, n, k),
            flags & 1 != 0,
            flags & 2 != 0,
            flags & 4 != 0,
            flags & 8 != 0,
            format,
        );
        let (got, want, bound) = stored_and_reference(&op, seed);
        if let Err(e) = within_rounding(&got, &want, &bound) {
            prop_assert!(false, "{:?}: {}", op, e);
        }
    }
}

/// Whether the product `(batch, m, n, k)` of row-major `a` by an `[n, k]` int8 weight in
/// `format`, broadcast over the batch, reads the weight in place on the dot kernel.
fn reads_int8_in_place(
    (batch, m, n, k): (usize, usize, usize, usize),
    format: WeightFormat,
) -> bool {
    let shape = Shape {
        batch,
        m,
        n,
        k,
        trans_a: false,
        trans_b: true,
        broadcast_b: true,
    };
    let (_, groups) = format.groups(k as u64);
    let bytes = vec![0u8; (n * k).next_multiple_of(4)];
    let scales = vec![1f32; n * groups as usize];
    let view =
        WeightView::new(&bytes, &scales, (n * k) as u64, n as u64, k as u64, format).unwrap();
    let a = vec![0f32; batch * m * k];
    let mut c = vec![0f32; batch * m * n];
    let product = Product {
        s: &shape,
        stacked: true,
        a: &a,
        b: &view,
        bias: None,
        alpha: 1.0,
        out: OutPtr(c.as_mut_ptr()),
    };
    matches!(product.fused(), Some(Fused::Int8(_)))
}

/// Whether every output equals its reference bit for bit.
fn bit_for_bit(got: &[f32], want: &[f32]) -> Result<(), String> {
    match got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!("element {i}: {} vs {}", got[i], want[i])),
    }
}

/// MiniLM's linear layers at batch 1 and 3 (12 rows, or 3 × 12 stacked) read int8 weights in
/// place, per channel or grouped; `k` below the dot kernel's decodes panels. Every output equals
/// the f32 product of the dequantised weight bit for bit (a tolerance of zero).
#[test]
fn int8_minilm_shapes_are_read_in_place() {
    let mut seed = 500;
    for batch in [1, 3] {
        for (n, k) in [(384, 384), (1152, 384), (1536, 384), (384, 1536)] {
            for group in [0, 12, 64] {
                let format = WeightFormat::Int8 { group };
                assert!(
                    reads_int8_in_place((batch, 12, n, k), format),
                    "{n}x{k} {group}"
                );
                let shape = (batch as u32, 12, n as u32, k as u32);
                let op = op(shape, false, true, true, true, format);
                let (got, want, _) = stored_and_reference(&op, seed);
                if let Err(e) = bit_for_bit(&got, &want) {
                    panic!("{op:?}: {e}");
                }
                seed += 1;
            }
        }
    }
    assert!(!reads_int8_in_place(
        (1, 12, 384, 64),
        WeightFormat::Int8 { group: 0 }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The in-place int8 path at random small-batch shapes (`k` often not a multiple of 8, odd
    /// `n`, 1 to 40 rows, per-channel or grouped scales, groups that do not divide `k`) equals
    /// the f32 product of the dequantised weight bit for bit. It is taken wherever the dot
    /// kernel is (shapes where it is not are skipped).
    #[test]
    fn int8_in_place_matches_dequantized(
        batch in 1usize..4,
        m in 1usize..41,
        n in 1usize..80,
        k in 128usize..700,
        group in prop_oneof![Just(0u32), Just(8), Just(12), Just(40), Just(128)],
        bias in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let format = WeightFormat::Int8 { group };
        prop_assume!(crate::ops::split::reference_uses_dot(batch * m, k));
        prop_assert!(reads_int8_in_place((batch, m, n, k), format));
        let op = op((batch as u32, m as u32, n as u32, k as u32), false, true, true, bias, format);
        let (got, want, _) = stored_and_reference(&op, seed);
        if let Err(e) = bit_for_bit(&got, &want) {
            prop_assert!(false, "{:?}: {}", op, e);
        }
    }
}
