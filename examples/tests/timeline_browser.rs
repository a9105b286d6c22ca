//! The HTML memory timeline renders in a real browser: the MNIST sample runs on the host backend
//! with `--trace`, `tensormem-report` reads the trace file back and writes the timeline, and
//! headless Chromium takes a screenshot that must not be blank (many distinct colours, a good share
//! of non-background pixels; decoded with Python's zlib).
//!
//! The browser part skips with a printed reason when `chromium` or `python3` is absent.
// Test helpers outside test functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tensormem::Trace;

#[path = "support/run.rs"]
mod run;
#[path = "support/scratch.rs"]
mod scratch;
use run::{assert_success, report_html, run};
use scratch::Scratch;

/// Runs the MNIST sample with tracing and the report on its trace; returns the HTML path.
fn traced_mnist_timeline(dir: &Path) -> PathBuf {
    let json = dir.join("mnist.trace.json");
    let out = run(
        env!("CARGO_BIN_EXE_mnist"),
        &[
            "--backend",
            "host",
            "--runs",
            "2",
            "--trace",
            json.to_str().unwrap(),
        ],
    );
    assert_success(&out);
    let stdout = run::stdout(&out);
    assert!(stdout.contains("predicted 7 (label 7)"), "{stdout}");
    let trace =
        Trace::from_json(&std::fs::read_to_string(&json).unwrap(), "mnist.trace.json").unwrap();
    let lifetimes = trace.lifetimes();
    assert!(lifetimes.iter().any(|l| l.pool == "device/planned"));
    assert!(
        lifetimes.iter().all(|l| l.free_step.is_some()),
        "the sample frees everything"
    );
    let html = dir.join("mnist.html");
    report_html(&json, &html);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("activations (planned arena)") && page.contains("pool device/planned"));
    html
}

const PNG_CHECK: &str = r#"
import sys, zlib, struct
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat = 8, b''
while pos < len(d):
    n, t = struct.unpack('>I4s', d[pos:pos+8]); body = d[pos+8:pos+8+n]; pos += 12 + n
    if t == b'IHDR': w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    if t == b'IDAT': idat += body
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f = raw[i]; line = bytearray(raw[i+1:i+1+stride]); i += 1 + stride
    for x in range(stride):
        a = line[x-bpp] if x >= bpp else 0; b = prev[x]; c = prev[x-bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p-a), abs(p-b), abs(p-c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
px = [r[x:x+3] for r in rows for x in range(0, stride, bpp)]
bg = px[0]
print(len(set(px)), sum(p != bg for p in px) / len(px))
"#;

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_timeline_of_the_traced_mnist_sample_renders_in_headless_chromium() {
    let dir = Scratch::new("timeline");
    let html = traced_mnist_timeline(&dir);

    let Some(browser) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| have(b))
    else {
        println!("SKIPPED: no chromium on PATH (apt-get install chromium)");
        return;
    };
    if !have("python3") {
        println!("SKIPPED: no python3 to decode the screenshot");
        return;
    }
    let png = dir.join("mnist.png");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let check = run("python3", &["-c", PNG_CHECK, png.to_str().unwrap()]);
    assert_success(&check);
    let stdout = run::stdout(&check);
    let mut it = stdout.split_whitespace();
    let colours: usize = it.next().unwrap().parse().unwrap();
    let ink: f64 = it.next().unwrap().parse().unwrap();
    println!(
        "screenshot {}: {colours} colours, {:.1}% non-background",
        png.display(),
        ink * 100.0
    );
    assert!(colours >= 8, "{colours} colours: blank?");
    assert!(ink > 0.05, "{ink}: blank?");
}
