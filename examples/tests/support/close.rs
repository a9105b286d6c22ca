//! The tolerance check of a backend's values against a reference.

/// Asserts each of `got` within `tol` of the same element of `want` (the shorter sets the length:
/// a reference may be a prefix), naming a failure `{backend}: {what} {element} {i}`.
pub fn assert_within(
    backend: &str,
    what: &str,
    element: &str,
    got: &[f32],
    want: &[f32],
    tol: f32,
) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{backend}: {what} {element} {i}: got {g}, reference {w} (tolerance {tol})"
        );
    }
}
