//! Running a tool or sample as a user does, and reading what it printed: the exit status, stdout
//! as text or JSON, stderr, and the `--help`/`--version` conventions every binary shares.

#![allow(
    dead_code,
    reason = "each test file uses some of these helpers, none uses all"
)]
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "a helper failing is the test failing"
)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `bin` with `args` to completion; the caller checks the exit status. `XDG_RUNTIME_DIR` is
/// the temp directory, as `scripts/test.sh` sets it: the GPU backends' loaders want one.
pub fn run<S: AsRef<OsStr>>(bin: &str, args: &[S]) -> Output {
    Command::new(bin)
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}

/// What `o` printed on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What `o` printed on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Panics with both streams unless `o` exited 0.
pub fn assert_success(o: &Output) {
    assert!(o.status.success(), "{}\n{}", stdout(o), stderr(o));
}

/// Stdout parsed as JSON, whatever the exit status; a panic naming the parse error and stderr
/// when it is not JSON.
pub fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(o)))
}

/// As [`json`], after asserting exit 0 (the failure message is stderr).
pub fn json_ok(o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    json(o)
}

/// Runs `bin --help`, asserts exit 0 and that the text contains each of `needles`; returns the
/// text.
pub fn assert_help_lists(bin: &str, needles: &[&str]) -> String {
    let help = run(bin, &["--help"]);
    assert_eq!(help.status.code(), Some(0), "{bin}");
    let text = stdout(&help);
    for needle in needles {
        assert!(
            text.contains(needle),
            "{bin}: --help lacks {needle:?}:\n{text}"
        );
    }
    text
}

/// Runs `bin --version` and asserts exit 0 and this package's version in what it printed.
pub fn assert_version(bin: &str) {
    let version = run(bin, &["--version"]);
    assert_eq!(version.status.code(), Some(0), "{bin}");
    assert!(
        stdout(&version).contains(env!("CARGO_PKG_VERSION")),
        "{bin}"
    );
}

/// Runs `tensormem-report TRACE --html HTML`, panics unless it succeeds, and returns its output.
pub fn report_html(trace: &Path, html: &Path) -> Output {
    let out = run(
        env!("CARGO_BIN_EXE_tensormem-report"),
        &[trace.as_os_str(), OsStr::new("--html"), html.as_os_str()],
    );
    assert_success(&out);
    out
}
