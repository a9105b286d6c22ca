//! The HTML memory timeline renders in a real browser: a traced MNIST-shaped MLP (784 → 128 → 10,
//! batch 64) runs on the host backend, its trace goes through the JSON file format, the timeline is
//! written, and headless Chromium takes a screenshot that must not be blank (many distinct colours,
//! a good share of non-background pixels; decoded with Python's zlib).
//!
//! Skips with a printed reason when `chromium` or `python3` is absent.
// Test helpers outside `#[test]` functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;

use tensormem::{DType, Graph, HostBackend, HostConfig, Op, Runtime, RuntimeConfig, Trace, Tracer};

fn f32_bytes(v: f32, n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| v.to_ne_bytes()).collect()
}

fn mlp_trace() -> Trace {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let rt = Runtime::new(backend, RuntimeConfig::default()).unwrap();
    let tracer = Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    let mut g = Graph::new();
    let x = g.input("images", DType::F32, &[64, 784]);
    let w1 = g.weight("fc1.weight", DType::F32, &[128, 784]);
    let b1 = g.weight("fc1.bias", DType::F32, &[128]);
    let w2 = g.weight("fc2.weight", DType::F32, &[10, 128]);
    let b2 = g.weight("fc2.bias", DType::F32, &[10]);
    let linear = |m, n, k| Op::MatMul {
        batch: 1,
        m,
        n,
        k,
        trans_a: false,
        trans_b: true,
        broadcast_b: true,
        bias: true,
        alpha: 1.0,
    };
    let h = g
        .op(linear(64, 128, 784), &[x, w1, b1], &[64, 128], "fc1")
        .unwrap();
    let r = g
        .op(Op::Relu { len: 64 * 128 }, &[h], &[64, 128], "relu")
        .unwrap();
    let z = g
        .op(linear(64, 10, 128), &[r, w2, b2], &[64, 10], "fc2")
        .unwrap();
    let y = g
        .op(
            Op::Softmax {
                rows: 64,
                cols: 10,
                masked: false,
                rows_per_mask: 1,
            },
            &[z],
            &[64, 10],
            "softmax",
        )
        .unwrap();
    g.output(y);
    let mut m = rt.compile(&g).unwrap();
    for (w, n) in [(w1, 128 * 784), (b1, 128), (w2, 10 * 128), (b2, 10)] {
        m.set_weight(w, &f32_bytes(0.01, n)).unwrap();
    }
    for _ in 0..3 {
        m.set_input(x, &f32_bytes(0.5, 64 * 784)).unwrap();
        m.run().unwrap();
        let p = m.read_output::<f32>(y).unwrap();
        assert!((p[..10].iter().sum::<f32>() - 1.0).abs() < 1e-4);
    }
    drop(m);
    tracer.snapshot()
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
fn the_timeline_of_a_traced_mlp_renders_in_headless_chromium() {
    let trace = mlp_trace();
    let dir = std::env::temp_dir().join(format!("tensormem-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("mlp.trace.json");
    std::fs::write(&json, trace.to_chrome_json()).unwrap();
    let back =
        Trace::from_json(&std::fs::read_to_string(&json).unwrap(), "mlp.trace.json").unwrap();
    assert_eq!(back, trace);
    let html = dir.join("mlp.html");
    let page = back.to_html("MNIST-shaped MLP");
    assert!(page.contains("fc1.weight") && page.contains("pool device/planned"));
    std::fs::write(&html, &page).unwrap();

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
    let png = dir.join("mlp.png");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let check = Command::new("python3")
        .arg("-c")
        .arg(PNG_CHECK)
        .arg(&png)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
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
