//! Conversions of `quant`: f16 rounding against exhaustive and edge values, int8 quantisation
//! error bounds, and the round trip through `dequantize`.

use proptest::prelude::*;

use super::*;

/// Every one of the 63,488 finite halves converts to f32 and back to itself.
#[test]
fn every_finite_half_round_trips() {
    for h in 0..=u16::MAX {
        let v = f16_to_f32(h);
        if v.is_nan() {
            assert!(f32_to_f16(v) & 0x7c00 == 0x7c00 && f32_to_f16(v) & 0x3ff != 0);
            continue;
        }
        assert_eq!(f32_to_f16(v), h, "half {h:#06x} = {v}");
    }
}

/// The half's value by cases, straight from IEEE 754 (the decode before the branch-free one).
fn f16_by_cases(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    match exp {
        0 => sign * man * 2f32.powi(-24),
        0x1f if man == 0.0 => sign * f32::INFINITY,
        0x1f => {
            f32::from_bits(u32::from(h & 0x8000) << 16 | 0x7fc0_0000 | u32::from(h & 0x3ff) << 13)
        }
        e => sign * (1.0 + man / 1024.0) * 2f32.powi(e - 15),
    }
}

/// The branch-free decode equals the by-cases one bit for bit on all 65,536 halves (NaNs keep
/// their payload and come out quiet).
#[test]
fn f16_decode_matches_ieee_cases_exhaustively() {
    for h in 0..=u16::MAX {
        assert_eq!(
            f16_to_f32(h).to_bits(),
            f16_by_cases(h).to_bits(),
            "half {h:#06x}"
        );
    }
}

/// The slice decode (F16C where the CPU has it) equals the scalar one on every half, at every
/// length around the 8-wide step.
#[test]
fn slice_decode_matches_scalar() {
    let halves: Vec<u16> = (0..=u16::MAX).collect();
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let mut out = vec![0f32; halves.len()];
    decode_halves(&bytes, &mut out);
    for (h, v) in halves.iter().zip(&out) {
        assert_eq!(v.to_bits(), f16_by_cases(*h).to_bits(), "half {h:#06x}");
    }
    for len in 0..20 {
        let mut out = vec![-1f32; len];
        decode_halves(&bytes[2 * 1000..], &mut out);
        let want: Vec<f32> = halves[1000..1000 + len]
            .iter()
            .map(|&h| f16_to_f32(h))
            .collect();
        assert_eq!(out, want, "length {len}");
    }
}

#[test]
fn f16_edges() {
    assert_eq!(f32_to_f16(1.0), 0x3c00);
    assert_eq!(f32_to_f16(-2.0), 0xc000);
    assert_eq!(f32_to_f16(65504.0), 0x7bff);
    assert_eq!(f32_to_f16(65520.0), 0x7c00, "rounds up to infinity");
    assert_eq!(f32_to_f16(1e9), 0x7c00);
    assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
    assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001, "smallest subnormal");
    assert_eq!(
        f32_to_f16(2.0e-8),
        0x0000,
        "below half the smallest subnormal"
    );
    assert_eq!(f32_to_f16(-0.0), 0x8000);
    // Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
    assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
    assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
    assert_eq!(f16_to_f32(0x8001), -5.960_464_5e-8);
}

proptest! {
    /// f16 is the nearest half: relative error at most 2^-11 in the normal range.
    #[test]
    fn f16_rounding_error_is_half_an_ulp(v in -60000f32..60000f32) {
        let back = f16_to_f32(f32_to_f16(v));
        if v.abs() >= 6.2e-5 {
            prop_assert!((back - v).abs() <= v.abs() * 2f32.powi(-11), "{v} -> {back}");
        } else {
            prop_assert!((back - v).abs() <= 2f32.powi(-25), "{v} -> {back}");
        }
    }

    /// int8 error is at most half a step (scale / 2) per element, for any group size.
    #[test]
    fn int8_error_is_at_most_half_a_step(
        values in proptest::collection::vec(-100f32..100f32, 1..200),
        group in 0u32..9,
    ) {
        let inner = values.len() as u64;
        let q = quantize(&values, 1, inner, WeightFormat::Int8 { group }).unwrap();
        prop_assert_eq!(q.bytes.len() % 4, 0);
        let (_, groups) = WeightFormat::Int8 { group }.groups(inner);
        prop_assert_eq!(q.scales.len() as u64, groups);
        let back = dequantize(&q.bytes, &q.scales, 1, inner, WeightFormat::Int8 { group }).unwrap();
        let (g, _) = WeightFormat::Int8 { group }.groups(inner);
        for (i, (v, b)) in values.iter().zip(&back).enumerate() {
            let scale = q.scales[i / g as usize];
            // Half a step, plus the f32 rounding of `v / scale` (a tie can round either way: up
            // to 127 · 2^-24 of a step past the half) and of `q · scale` (an ulp of the result).
            let bound = scale * (0.5 + 1e-5) + v.abs() * 2e-7;
            prop_assert!((v - b).abs() <= bound, "{} -> {} (scale {})", v, b, scale);
        }
    }
}

#[test]
fn int8_is_symmetric_per_channel_and_per_group() {
    // Two channels of 5 (an odd row: the second starts mid-word).
    let values = [1.0, -2.0, 0.5, 0.0, 2.0, 10.0, -10.0, 5.0, 0.0, -2.5];
    let per_channel = quantize(&values, 2, 5, WeightFormat::Int8 { group: 0 }).unwrap();
    assert_eq!(per_channel.scales, [2.0 / 127.0, 10.0 / 127.0]);
    assert_eq!(
        per_channel.bytes.len(),
        12,
        "10 bytes padded to whole words"
    );
    let q: Vec<i8> = per_channel.bytes[..10].iter().map(|&b| b as i8).collect();
    assert_eq!(q, [64, -127, 32, 0, 127, 127, -127, 64, 0, -32]);
    // Groups of 2: scales [2, groups = 3] per channel.
    let grouped = quantize(&values, 2, 5, WeightFormat::Int8 { group: 2 }).unwrap();
    assert_eq!(grouped.scales.len(), 6);
    assert_eq!(grouped.scales[0], 2.0 / 127.0);
    assert_eq!(grouped.scales[2], 2.0 / 127.0);
    // An all-zero group gets scale 1, never a division by zero.
    let zeros = quantize(&[0.0; 4], 1, 4, WeightFormat::Int8 { group: 0 }).unwrap();
    assert_eq!(zeros.scales, [1.0]);
    assert!(zeros.bytes.iter().all(|&b| b == 0));
}

#[test]
fn bad_input_is_an_error() {
    assert!(matches!(
        quantize(&[1.0; 5], 2, 3, WeightFormat::F16),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        quantize(&[1.0, f32::NAN], 1, 2, WeightFormat::Int8 { group: 0 }),
        Err(Error::NonFiniteWeight { element: 1, .. })
    ));
    assert!(matches!(
        dequantize(&[0; 3], &[1.0], 1, 4, WeightFormat::Int8 { group: 0 }),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(&[0; 8], &[1.0], 2, 4, WeightFormat::Int8 { group: 0 }),
        Err(Error::SizeMismatch { .. })
    ));
}

#[test]
fn f16_layout_is_two_per_word() {
    let q = quantize(&[1.0, -2.0, 0.5], 1, 3, WeightFormat::F16).unwrap();
    assert_eq!(q.bytes, [0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0, 0]);
    let back = dequantize(&q.bytes, &[], 1, 3, WeightFormat::F16).unwrap();
    assert_eq!(back, [1.0, -2.0, 0.5]);
}

/// Int8-dynamic is stored as int8 (same bytes, scales and groups), conv2d refuses it, and a
/// matmul refuses scale groups whose integer sums could overflow 32 bits.
#[test]
fn int8_dynamic_is_int8_storage_with_its_own_refusals() {
    let (dynamic, int8) = (
        WeightFormat::Int8Dynamic { group: 4 },
        WeightFormat::Int8 { group: 4 },
    );
    assert_eq!(dynamic.storage(), int8);
    assert_eq!(dynamic.dtype(), DType::I8);
    assert!(dynamic.has_scales());
    assert_eq!(dynamic.groups(10), (4, 3));
    let values: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
    assert_eq!(
        quantize(&values, 2, 10, dynamic).unwrap(),
        quantize(&values, 2, 10, int8).unwrap()
    );
    let conv = Op::Conv2d {
        n: 1,
        c_in: 2,
        h: 5,
        w: 5,
        c_out: 3,
        kh: 3,
        kw: 3,
        stride: 1,
        pad: 0,
        bias: false,
        weight_format: dynamic,
    };
    let err = conv.signature().unwrap_err();
    assert!(err.to_string().contains("int8-dynamic"), "{err}");
    let mm = |k: u32, group: u32| {
        Op::batched_matmul(1, 2, 3, k).with_weight_format(WeightFormat::Int8Dynamic { group })
    };
    let longest = MAX_DYNAMIC_GROUP as u32;
    assert!(mm(longest, 0).signature().is_ok());
    assert!(mm(longest + 1, longest).signature().is_ok());
    let err = mm(longest + 1, 0).signature().unwrap_err();
    assert!(err.to_string().contains("per scale group"), "{err}");
    assert!(255 * 128 * MAX_DYNAMIC_GROUP <= i32::MAX as u64);
}
