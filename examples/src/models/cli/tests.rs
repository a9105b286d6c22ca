//! Unit tests of `cli`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use super::*;

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn defaults_and_passthrough() {
    let a = parse_common(args(&["a.u8", "--model-dir", "d"])).unwrap();
    assert_eq!(a.backend, "auto");
    assert!(!a.json);
    assert_eq!(a.runs, 10);
    assert_eq!(a.rest, args(&["a.u8", "--model-dir", "d"]));
}

#[test]
fn both_value_forms_and_double_dash() {
    let a = parse_common(args(&[
        "--backend=host",
        "--json",
        "--runs",
        "3",
        "--",
        "--json",
    ]))
    .unwrap();
    assert_eq!(a.backend, "host");
    assert!(a.json);
    assert_eq!(a.runs, 3);
    assert_eq!(a.rest, args(&["--json"]));
    let a = parse_common(args(&["--backend", "vulkan"])).unwrap();
    assert_eq!(a.backend, "vulkan");
}

#[test]
fn missing_or_bad_values_are_errors() {
    assert!(matches!(
        parse_common(args(&["--backend"])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        parse_common(args(&["--runs", "0"])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        parse_common(args(&["--runs=x"])),
        Err(Error::InvalidArgument(_))
    ));
}
