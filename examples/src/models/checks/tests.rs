//! Unit tests of `checks`.

#![allow(clippy::panic, reason = "tests fail loudly")]

use super::*;

#[test]
fn non_finite_values_are_named_by_row_and_column() {
    assert!(finite("x", &[1.0, -2.0, 0.0], 3).is_ok());
    assert!(finite("x", &[], 3).is_ok());
    for (bad, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        match finite("minilm embeddings", &[0.0, 1.0, 2.0, 3.0, bad, 5.0], 3) {
            Err(Error::Malformed {
                source_name,
                message,
                ..
            }) => {
                assert_eq!(source_name, "minilm embeddings");
                assert!(
                    message.starts_with(&format!("row 1, column 1 is {shown}")),
                    "{message}"
                );
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }
    match finite("w", &[f32::NAN], 0) {
        Err(Error::Malformed { message, .. }) => assert!(message.starts_with("value 0 is NaN")),
        other => panic!("expected Malformed, got {other:?}"),
    }
}
