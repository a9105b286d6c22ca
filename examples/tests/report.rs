//! End-to-end test of `tensormem-report`: a traced runtime workload on the host backend is written
//! as Chrome trace JSON, and the binary prints its findings largest saving first, writes the HTML
//! timeline, and rejects a malformed file with its line number.
// Test helpers outside `#[test]` functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tensormem::{DType, HostBackend, HostConfig, Runtime, RuntimeConfig, Tracer};

#[path = "support/run.rs"]
mod run;
#[path = "support/scratch.rs"]
mod scratch;
use run::{assert_help_lists, assert_version, report_html, run};
use scratch::Scratch;

const REPORT: &str = env!("CARGO_BIN_EXE_tensormem-report");

fn workload_trace() -> String {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    let unused = rt.alloc(DType::U8, &[8192], "unused scratch").unwrap();
    let early = rt.alloc(DType::U8, &[4096], "early weights").unwrap();
    let b = rt.alloc(DType::U8, &[1024], "b").unwrap();
    rt.upload(&b, &[1u8; 1024]).unwrap();
    rt.download::<u8>(&b).unwrap();
    rt.free(b).unwrap();
    rt.upload(&early, &[1u8; 4096]).unwrap();
    rt.download::<u8>(&early).unwrap();
    rt.free(early).unwrap();
    rt.free(unused).unwrap();
    tracer.snapshot().to_chrome_json()
}

#[test]
fn prints_findings_largest_first_and_writes_the_timeline() {
    let d = Scratch::new("report-test");
    let trace = d.join("trace.json");
    let html = d.join("timeline.html");
    std::fs::write(&trace, workload_trace()).unwrap();
    let out = report_html(&trace, &html);
    let stdout = run::stdout(&out);
    let rows: Vec<&str> = stdout
        .lines()
        .skip(2)
        .filter(|l| !l.starts_with("timeline"))
        .collect();
    assert!(
        rows[0].contains("unused allocation") && rows[0].contains("unused scratch"),
        "{stdout}"
    );
    assert!(rows[0].trim_start().starts_with("8192"), "{stdout}");
    assert!(
        rows.iter()
            .any(|r| r.contains("early allocation") && r.contains("early weights")),
        "{stdout}"
    );
    let saved: Vec<u64> = rows
        .iter()
        .map(|r| r.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert!(saved.windows(2).all(|w| w[0] >= w[1]), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("unused scratch"));

    let text = run::stdout(&run(REPORT, &[trace.to_str().unwrap(), "--json"]));
    assert!(
        text.trim_start().starts_with('[')
            && text.contains("\"kind\":\"unused allocation\",\"id\""),
        "{text}"
    );
}

#[test]
fn a_malformed_file_fails_with_its_line() {
    let d = Scratch::new("report-test");
    let bad = d.write(
        "bad.json",
        "{\n\"tensormemEvents\": [\n{\"t\": 1, \"k\": \"free\"}\n]}\n",
    );
    let out = run(REPORT, &[&bad]);
    assert_eq!(out.status.code(), Some(1));
    let err = run::stderr(&out);
    assert!(err.contains("bad.json:3:") && err.contains("'id'"), "{err}");
    assert_eq!(run(REPORT, &["--bogus"]).status.code(), Some(2));
    let out = run(REPORT, &[d.join("missing.json")]);
    assert_eq!(out.status.code(), Some(1));
}

/// Regression for issue 18: eight allocations of 2^62 bytes made the timeline's pool total wrap
/// (the HTML showed a peak of 3·2^62 instead of 2^65).
#[test]
fn huge_sizes_do_not_overflow_the_totals() {
    use tensormem::trace::EventKind;
    let tracer = Tracer::new();
    for id in 0..8u64 {
        tracer.record(EventKind::Alloc {
            id,
            pool: "device".into(),
            size: 1 << 62,
            offset: 0,
            label: format!("huge {id}"),
            parent: None,
        });
    }
    for id in 0..8u64 {
        tracer.record(EventKind::FreeRequested { id });
    }
    let d = Scratch::new("report-test");
    let trace = d.join("huge.json");
    let html = d.join("huge.html");
    std::fs::write(&trace, tracer.snapshot().to_chrome_json()).unwrap();
    report_html(&trace, &html);
    let page = std::fs::read_to_string(&html).unwrap();
    // 8 · 2^62 = 2^65 bytes = 32 EiB.
    assert!(page.contains("pool device (peak 32.00 EiB)"), "{page}");
    let json = run(REPORT, &[trace.to_str().unwrap(), "--json"]);
    assert!(json.status.success());
}

#[test]
fn help_and_version_follow_the_shared_conventions() {
    assert_help_lists(
        REPORT,
        &[
            "--html",
            "--json",
            "--min-gap-ns",
            "--version",
            "Exit status:",
        ],
    );
    assert_version(REPORT);
}
