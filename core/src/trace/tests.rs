//! Tests of tracing: recording through a real runtime on the host backend, the JSON round trip and
//! its errors, the Chrome and HTML exports, and each inefficiency pattern planted in a workload
//! with the exact peak saving checked.

use std::sync::Arc;

use super::*;
use crate::host::{HostBackend, HostConfig};
use crate::ops::{DType, Op};
use crate::{Error, Graph, Runtime, RuntimeConfig, Tensor};

fn traced_runtime() -> (Runtime, Tracer) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    (rt, tracer)
}

fn alloc(rt: &Runtime, bytes: usize, label: &str) -> Tensor {
    rt.alloc(DType::U8, &[bytes], label).unwrap()
}

/// A write then a read of the whole tensor.
fn touch(rt: &Runtime, t: &Tensor) {
    rt.upload(t, &vec![7u8; t.size() as usize]).unwrap();
    assert_eq!(rt.download::<u8>(t).unwrap()[0], 7);
}

/// A used 1 KiB tensor "b", freed at once: the peak the findings measure their savings against.
fn brief_b(rt: &Runtime) {
    let b = alloc(rt, 1024, "b");
    touch(rt, &b);
    rt.free(b).unwrap();
}

fn findings(tracer: &Tracer, kind: FindingKind, label: &str) -> Vec<Finding> {
    analyze(&tracer.snapshot(), &AnalyzeOptions::default())
        .into_iter()
        .filter(|f| f.kind == kind && f.label == label)
        .collect()
}

fn one(tracer: &Tracer, kind: FindingKind, label: &str) -> Finding {
    let f = findings(tracer, kind, label);
    assert_eq!(
        f.len(),
        1,
        "{kind:?} for {label}: {f:#?}\nall: {:#?}",
        analyze(&tracer.snapshot(), &AnalyzeOptions::default())
    );
    f.into_iter().next().unwrap()
}

/// Each event's kind, by its name in the JSON form ("alloc", "free", ...).
pub(crate) fn kind_names(trace: &Trace) -> Vec<&'static str> {
    trace
        .events
        .iter()
        .map(|e| match e.kind {
            EventKind::Alloc { .. } => "alloc",
            EventKind::FreeRequested { .. } => "free",
            EventKind::FreeReclaimed { .. } => "reclaim",
            EventKind::BlockReserve { .. } => "reserve",
            EventKind::BlockRelease { .. } => "release",
            EventKind::Upload { .. } => "upload",
            EventKind::Download { .. } => "download",
            EventKind::Use { .. } => "use",
            EventKind::Kv { .. } => "kv",
            EventKind::Transfer { .. } => "transfer",
        })
        .collect()
}

#[test]
fn pool_events_are_recorded_in_order() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 100, "a");
    touch(&rt, &a);
    rt.free(a).unwrap();
    rt.synchronize().unwrap();
    rt.device_pool().trim().unwrap();
    assert_eq!(
        kind_names(&tracer.snapshot()),
        [
            "reserve", "alloc", "upload", "download", "free", "reclaim", "release"
        ]
    );
    let t = tracer.snapshot();
    assert!(t.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    match &t.events[1].kind {
        EventKind::Alloc {
            size, label, pool, ..
        } => {
            assert_eq!((*size, label.as_str(), pool.as_str()), (100, "a", "device"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tracing_off_records_nothing_and_can_stop() {
    let (rt, tracer) = traced_runtime();
    rt.set_tracer(None);
    assert!(rt.tracer().is_none());
    let a = alloc(&rt, 64, "a");
    touch(&rt, &a);
    rt.free(a).unwrap();
    assert!(tracer.is_empty());
}

#[test]
fn backtraces_are_recorded_and_reach_the_leak_report() {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    let tracer = Tracer::with_backtraces();
    rt.set_tracer(Some(tracer.clone()));
    let a = alloc(&rt, 64, "leaky");
    let t = tracer.snapshot();
    let bt = t.events.iter().find_map(|e| e.backtrace.clone()).unwrap();
    assert!(!bt.is_empty());
    match rt.check_leaks() {
        Err(Error::Leak {
            count,
            bytes,
            report,
        }) => {
            assert_eq!((count, bytes), (1, 64));
            assert!(
                report.contains("leaky") && report.contains("allocated at:"),
                "{report}"
            );
        }
        other => panic!("{other:?}"),
    }
    rt.free(a).unwrap();
    rt.check_leaks().unwrap();
}

fn sample_trace() -> Trace {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 256, "weights \"w\"\n<b>");
    let b = alloc(&rt, 128, "x");
    touch(&rt, &a);
    touch(&rt, &b);
    rt.free(a).unwrap();
    let _leak = b; // never freed: a leak in the trace
    tracer.record(EventKind::Use {
        id: 99,
        op: "unknown id".into(),
        access: Access::Read,
        size: 4,
    });
    tracer.snapshot()
}

#[test]
fn chrome_json_round_trips() {
    let mut t = sample_trace();
    t.events[1].backtrace = Some("frame 0\n  at \"x.rs\":1\t\u{1}".into());
    let json = t.to_chrome_json();
    let back = Trace::from_json(&json, "t.json").unwrap();
    assert_eq!(back, t);
    let raw = Trace::from_json(&t.to_raw_json(), "raw.json").unwrap();
    assert_eq!(raw, t);
}

#[test]
fn chrome_json_has_counters_and_slices() {
    let t = sample_trace();
    let v: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let in_use: Vec<u64> = evs
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "in use")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(in_use, [256, 384, 128]);
    let reserved: Vec<u64> = evs
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "reserved")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(reserved.len(), 1);
    assert!(reserved[0] >= 384);
    let slices: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[0]["name"], "weights \"w\"\n<b>");
    assert_eq!(slices[1]["args"]["leaked"], true);
    // Overlapping lifetimes sit on different rows.
    assert_ne!(slices[0]["tid"], slices[1]["tid"]);
    assert_eq!(evs.iter().filter(|e| e["ph"] == "i").count(), 4);
}

#[test]
fn malformed_files_are_errors_with_lines() {
    let good = sample_trace().to_chrome_json();
    let line_of = |e: Error| match e {
        Error::Malformed { line, message, .. } => (line, message),
        other => panic!("{other:?}"),
    };
    // Invalid JSON.
    let (line, _) = line_of(Trace::from_json("{\n\"a\": [1,\n", "x").unwrap_err());
    assert_eq!(line, 3);
    // A Chrome trace from another tool.
    let (line, msg) = line_of(Trace::from_json("{\"traceEvents\": []}", "x").unwrap_err());
    assert_eq!(line, 1);
    assert!(msg.contains("tensormemEvents"));
    // A bad field in the third raw event: its own line.
    let raw_start = good
        .lines()
        .position(|l| l.contains("tensormemEvents"))
        .unwrap()
        + 2;
    let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
    lines[raw_start + 1] = lines[raw_start + 1].replace("\"id\":", "\"idx\":");
    let (line, msg) = line_of(Trace::from_json(&lines.join("\n"), "x").unwrap_err());
    assert_eq!(line, raw_start + 2, "{msg}");
    assert!(msg.contains("'id'"));
    let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
    lines[raw_start - 1] = lines[raw_start - 1].replace("\"k\":\"reserve\"", "\"k\":\"bogus\"");
    let (line, msg) = line_of(Trace::from_json(&lines.join("\n"), "x").unwrap_err());
    assert_eq!((line, msg.contains("bogus")), (raw_start, true));
    // Time going backwards.
    let raw = "[\n{\"t\":5,\"k\":\"free\",\"id\":1},\n{\"t\":4,\"k\":\"free\",\"id\":1}\n]";
    let (line, _) = line_of(Trace::from_json(raw, "x").unwrap_err());
    assert_eq!(line, 3);
    // Wrong top-level types.
    assert!(matches!(
        Trace::from_json("3", "x"),
        Err(Error::Malformed { .. })
    ));
    assert!(matches!(
        Trace::from_json("[3]", "x"),
        Err(Error::Malformed { .. })
    ));
    // Every truncation of a good file is an error, never a panic. (Only the final newline may go:
    // the document is complete before it.)
    let body = good.trim_end();
    for cut in (0..body.len())
        .step_by(7)
        .filter(|&c| body.is_char_boundary(c))
    {
        assert!(Trace::from_json(&body[..cut], "x").is_err(), "cut at {cut}");
    }
}

#[test]
fn html_is_self_contained_and_shows_each_allocation() {
    let t = sample_trace();
    let html = t.to_html("sample <trace>");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>sample &lt;trace&gt;</title>"));
    assert_eq!(html.matches("<svg").count(), 1);
    assert_eq!(html.matches("<polygon").count(), 2);
    assert!(html.contains("weights &quot;w&quot;\n&lt;b&gt;"));
    assert!(html.contains("never freed (leak)"));
    for banned in ["<script", "src=", "href=", "url("] {
        assert!(!html.contains(banned), "{banned}");
    }
}

#[test]
fn html_stacks_allocations_and_drops_them_when_lower_ones_are_freed() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 400, "bottom");
    let b = alloc(&rt, 400, "top");
    rt.free(a).unwrap();
    rt.free(b).unwrap();
    let html = tracer.snapshot().to_html("stack");
    let top = html
        .lines()
        .find(|l| l.contains("<polygon") && l.contains("<title>top"))
        .unwrap();
    let points: Vec<(f64, f64)> = top
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .split(' ')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect();
    // Two segments: stacked on `bottom`, then dropped to the floor after it is freed.
    let ys: std::collections::BTreeSet<i64> = points.iter().map(|p| p.1.round() as i64).collect();
    assert_eq!(ys.len(), 3, "{points:?}"); // floor, middle, top
}

// ---- Inefficiency patterns, each planted in a real runtime workload. ----

#[test]
fn early_allocation_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "early");
    brief_b(&rt);
    touch(&rt, &a);
    rt.free(a).unwrap();
    let f = one(&tracer, FindingKind::EarlyAllocation, "early");
    assert_eq!((f.saved, f.wasted, f.size), (1024, 4096, 4096));
    assert!(findings(&tracer, FindingKind::EarlyAllocation, "b").is_empty());
}

#[test]
fn late_deallocation_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "late");
    touch(&rt, &a);
    brief_b(&rt);
    rt.free(a).unwrap();
    assert_eq!(
        one(&tracer, FindingKind::LateDeallocation, "late").saved,
        1024
    );
}

#[test]
fn unused_allocation_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "unused");
    brief_b(&rt);
    rt.free(a).unwrap();
    let f = one(&tracer, FindingKind::UnusedAllocation, "unused");
    assert_eq!((f.saved, f.wasted), (4096, 4096));
    assert!(findings(&tracer, FindingKind::Leak, "unused").is_empty());
}

#[test]
fn leak_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 2048, "leak");
    touch(&rt, &a);
    brief_b(&rt);
    let f = one(&tracer, FindingKind::Leak, "leak");
    assert_eq!((f.saved, f.size), (1024, 2048));
    assert!(findings(&tracer, FindingKind::Leak, "b").is_empty());
    // The same allocation through the pool's strict mode.
    assert!(matches!(
        rt.check_leaks(),
        Err(Error::Leak {
            count: 1,
            bytes: 2048,
            ..
        })
    ));
    rt.free(a).unwrap();
}

#[test]
fn temporary_idleness_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "idle");
    rt.upload(&a, &[1u8; 4096]).unwrap();
    let b = alloc(&rt, 2048, "b");
    touch(&rt, &b);
    rt.free(b).unwrap();
    assert_eq!(rt.download::<u8>(&a).unwrap()[0], 1);
    rt.free(a).unwrap();
    assert_eq!(
        one(&tracer, FindingKind::TemporaryIdleness, "idle").saved,
        2048
    );
    assert!(findings(&tracer, FindingKind::DeadWrite, "idle").is_empty());
}

#[test]
fn dead_write_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "dead");
    rt.upload(&a, &[1u8; 4096]).unwrap();
    brief_b(&rt);
    rt.upload(&a, &[2u8; 4096]).unwrap();
    assert_eq!(rt.download::<u8>(&a).unwrap()[0], 2);
    rt.free(a).unwrap();
    let f = one(&tracer, FindingKind::DeadWrite, "dead");
    // The first write is dead, so the allocation could start at the second: b's peak goes.
    assert_eq!(f.saved, 1024);
    assert!(findings(&tracer, FindingKind::DeadWrite, "b").is_empty());
}

#[test]
fn overallocation_is_reported_with_its_peak_saving() {
    let (rt, tracer) = traced_runtime();
    let a = alloc(&rt, 4096, "big");
    rt.write_bytes(a.allocation(), 0, &[3u8; 1024]).unwrap();
    let mut out = [0u8; 1024];
    rt.read_bytes(a.allocation(), 0, &mut out).unwrap();
    rt.free(a).unwrap();
    let f = one(&tracer, FindingKind::Overallocation, "big");
    assert_eq!((f.saved, f.wasted), (3072, 3072));
}

#[test]
fn findings_come_largest_saving_first() {
    let (rt, tracer) = traced_runtime();
    let unused = alloc(&rt, 8192, "unused");
    let early = alloc(&rt, 4096, "early");
    brief_b(&rt);
    touch(&rt, &early);
    rt.free(early).unwrap();
    rt.free(unused).unwrap();
    let all = analyze(&tracer.snapshot(), &AnalyzeOptions::default());
    assert!(all.windows(2).all(|w| w[0].saved >= w[1].saved));
    assert_eq!(
        (all[0].kind, all[0].saved),
        (FindingKind::UnusedAllocation, 8192)
    );
}

/// x -> scale -> scale -> scale -> out, on the host backend.
fn chain() -> (Graph, crate::TensorId, crate::TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[256]);
    let h1 = g
        .op(
            Op::Scale {
                len: 256,
                alpha: 2.0,
            },
            &[x],
            &[256],
            "h1",
        )
        .unwrap();
    let h2 = g
        .op(
            Op::Scale {
                len: 256,
                alpha: 2.0,
            },
            &[h1],
            &[256],
            "h2",
        )
        .unwrap();
    let y = g
        .op(
            Op::Scale {
                len: 256,
                alpha: 2.0,
            },
            &[h2],
            &[256],
            "y",
        )
        .unwrap();
    g.output(y);
    (g, x, y)
}

#[test]
fn model_runs_record_uses_and_planned_lifetimes() {
    let (rt, tracer) = traced_runtime();
    let (g, x, y) = chain();
    let mut m = rt.compile(&g).unwrap();
    m.set_input(x, bytemuck::cast_slice(&[1.0f32; 256]))
        .unwrap();
    m.run().unwrap();
    assert_eq!(m.read_output::<f32>(y).unwrap()[0], 8.0);
    drop(m);
    let t = tracer.snapshot();
    let lifetimes = t.lifetimes();
    let arena = lifetimes
        .iter()
        .find(|l| l.label == "activations (planned arena)")
        .unwrap();
    let planned: Vec<&Lifetime> = lifetimes
        .iter()
        .filter(|l| l.pool == "device/planned")
        .collect();
    assert_eq!(
        planned.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(),
        ["h1", "h2"]
    );
    for l in &planned {
        assert_eq!(l.parent, Some(arena.id));
        assert_eq!(l.size, 1024);
        assert_eq!(l.uses.len(), 2);
        assert_eq!((l.uses[0].1, l.uses[1].1), (Access::Write, Access::Read));
        assert!(l.free_step.is_some());
    }
    // h1 and h2 overlap only at node h2 (both bound), so the plan puts them apart.
    assert_ne!(planned[0].offset, planned[1].offset);
    let uses = t
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Use { .. }))
        .count();
    assert_eq!(uses, 6);
    let xl = lifetimes.iter().find(|l| l.label == "x").unwrap();
    assert_eq!(
        xl.uses.iter().map(|u| u.1).collect::<Vec<_>>(),
        [Access::Write, Access::Read]
    );
    // The arena is used through its tensors: not reported as unused.
    let all = analyze(&t, &AnalyzeOptions::default());
    assert!(
        !all.iter()
            .any(|f| f.id == arena.id && f.kind == FindingKind::UnusedAllocation),
        "{all:#?}"
    );
    assert!(!all.iter().any(|f| f.kind == FindingKind::Leak), "{all:#?}");
}

#[test]
fn model_output_written_twice_without_a_read_is_a_dead_write() {
    let (rt, tracer) = traced_runtime();
    let (g, x, y) = chain();
    let mut m = rt.compile(&g).unwrap();
    m.set_input(x, bytemuck::cast_slice(&[1.0f32; 256]))
        .unwrap();
    m.run().unwrap();
    m.run().unwrap();
    m.read_output::<f32>(y).unwrap();
    drop(m);
    let f = one(&tracer, FindingKind::DeadWrite, "y");
    assert_eq!(f.size, 1024);
}
