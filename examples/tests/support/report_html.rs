//! Running `tensormem-report` on a trace to write its HTML timeline, as the tests do.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `tensormem-report TRACE --html HTML`, panics unless it succeeds, and returns its output.
pub fn report_html(trace: &Path, html: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_tensormem-report"))
        .arg(trace)
        .arg("--html")
        .arg(html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
