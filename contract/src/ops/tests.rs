//! Checked shape arithmetic of the op signatures.

use super::*;

/// Regression: a conv output size was truncated with `as u32` and the op ran with a
/// wrong output size, returning Ok.
#[test]
fn conv_output_size_is_never_truncated() {
    // A 1x1 convolution of a 1x1 image with padding `pad` on each side.
    let conv = |pad| Op::Conv2d {
        n: 1,
        c_in: 1,
        h: 1,
        w: 1,
        c_out: 1,
        kh: 1,
        kw: 1,
        stride: 1,
        pad,
        bias: false,
        weight_format: WeightFormat::F32,
    };
    let over = conv(1 << 31);
    assert!(matches!(
        over.conv_out(),
        Err(Error::ArithmeticOverflow { .. })
    ));
    assert!(matches!(
        over.signature(),
        Err(Error::ArithmeticOverflow { .. })
    ));
    // Just inside u32: the side is exact, and the operand is then too large for a u32 index.
    let inside = conv((1 << 31) - 1);
    assert_eq!(inside.conv_out().unwrap(), (u32::MAX, u32::MAX));
    assert!(matches!(inside.signature(), Err(Error::TooLarge { .. })));
}

/// Regression: permute dims whose product exceeds 64 bits panicked in debug builds
/// ("attempt to multiply with overflow") and wrapped in release.
#[test]
fn shape_products_are_checked() {
    let permute = Op::Permute {
        dims: [u32::MAX; 4],
        perm: [3, 2, 1, 0],
    };
    assert!(matches!(
        permute.signature(),
        Err(Error::ArithmeticOverflow { .. })
    ));
    let matmul = Op::batched_matmul(u32::MAX, u32::MAX, u32::MAX, u32::MAX);
    assert!(matches!(
        matmul.signature(),
        Err(Error::ArithmeticOverflow { .. })
    ));
    let big = Op::Relu { len: u32::MAX };
    let sig = big.signature().unwrap();
    assert_eq!(sig.inputs[0].size(), u64::from(u32::MAX) * 4);
    let gather = Op::Embedding {
        vocab: 1 << 16,
        dim: 1 << 16,
        rows: 1,
        weight_format: WeightFormat::F32,
    };
    assert!(matches!(
        gather.signature(),
        Err(Error::TooLarge {
            limit_name: "2^32 - 1 elements (kernels index in u32)",
            ..
        })
    ));
}

#[test]
fn binding_sizes_are_exact_with_one_error_each_way() {
    let op = Op::Scale { len: 8, alpha: 2.0 };
    assert!(op.check_binding_sizes(&[32, 32]).is_ok());
    for bad in [28, 36] {
        assert!(matches!(
            op.check_binding_sizes(&[32, bad]),
            Err(Error::BindingSize {
                op: "scale",
                operand: "y",
                index: 1,
                expected: 32,
                actual,
            }) if actual == bad
        ));
    }
    assert!(matches!(
        op.check_binding_sizes(&[32, 32, 32]),
        Err(Error::BindingCount {
            expected: 2,
            actual: 3,
            ..
        })
    ));
}
