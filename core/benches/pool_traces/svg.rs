//! A dependency-free line chart: bytes over the events of one trace.

use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Columns a series is reduced to; each keeps the highest value of its events, so peaks show.
const COLUMNS: usize = 1200;

/// One line of the chart.
pub struct Series<'a> {
    /// Legend text.
    pub label: String,
    /// CSS colour.
    pub colour: &'static str,
    /// One value per event, in bytes.
    pub values: &'a [u64],
}

/// The chart of `series` (all of one length) as an SVG document.
pub fn chart(title: &str, series: &[Series<'_>]) -> String {
    let n = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let top = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let (unit, unit_name) = unit(top);
    let ymax = nice_ceiling(top as f64 / unit);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |i: f64| LEFT + plot_w * i / n as f64;
    let y = |v: f64| TOP + plot_h * (1.0 - v / unit / ymax);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="22" font-size="15">{}</text>"#,
        escape(title)
    );
    for k in 0..=4 {
        let v = ymax * f64::from(k) / 4.0;
        let yy = y(v * unit);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v:.1} {unit_name}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">event ({n} allocate/free requests)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0
    );
    for (k, s) in series.iter().enumerate() {
        let mut points = String::new();
        let cols = COLUMNS.min(s.values.len());
        for c in 0..cols {
            let (a, b) = (c * s.values.len() / cols, (c + 1) * s.values.len() / cols);
            let v = s.values[a..b.max(a + 1)].iter().copied().max().unwrap_or(0);
            let _ = write!(points, "{:.1},{:.1} ", x(a as f64), y(v as f64));
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{points}"/>"#,
            s.colour
        );
        let (lx, ly) = (LEFT + 12.0, TOP + 16.0 * k as f64 + 8.0);
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 18.0,
            s.colour,
            lx + 24.0,
            ly + 4.0,
            escape(&s.label),
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The binary unit that keeps `max` readable.
fn unit(max: u64) -> (f64, &'static str) {
    match max {
        m if m >= 1 << 30 => ((1u64 << 30) as f64, "GiB"),
        m if m >= 1 << 20 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 1 << 10 => (1024.0, "KiB"),
        _ => (1.0, "B"),
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
