//! Element-wise ops, `erf` and GELU against hand-computed and f64 reference values.

use super::*;

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

/// The vectorised GELU gives every element the scalar function's bits wherever it falls in the
/// slice (SIMD body or scalar tail), so a tiled graph's parts equal the whole.
#[test]
fn gelu_slice_equals_the_scalar_gelu_bit_for_bit_at_every_offset() {
    let mut x: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) * 0.0047).collect();
    x.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        6.0,
        -6.0,
        100.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    x.extend([0.84375, 1.25, 2.857_143, f32::MIN_POSITIVE, -3.5e-39]);
    for offset in 0..17 {
        let mut y = vec![0f32; x.len() - offset];
        crate::kernels::erf::gelu_slice(&x[offset..], &mut y);
        for (i, (&x, &y)) in x[offset..].iter().zip(&y).enumerate() {
            assert_eq!(
                y.to_bits(),
                gelu(x).to_bits(),
                "x = {x} at {i} from offset {offset}"
            );
        }
    }
    let mut y = [0f32; 1];
    crate::kernels::erf::gelu_slice(&[f32::NAN], &mut y);
    assert!(y[0].is_nan());
}
