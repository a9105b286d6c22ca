//! The plan drawn as SVG (`--svg`).

use tensormem::plan::{Buffer, Plan};
use tensormem_examples::cli::xml_escape;

use crate::report::gap;

/// Draws the plan: time on x, address on y (0 at the bottom), one rectangle per buffer, with the
/// lower bound (and capacity) as horizontal lines. Hover a rectangle for its id, lifetime and range.
pub(crate) fn draw_svg(
    ids: &[String],
    buffers: &[Buffer],
    plan: &Plan,
    lb: u64,
    cap: Option<u64>,
) -> String {
    let (w, h, margin) = (1200.0f64, 700.0f64, 40.0f64);
    let t0 = buffers.iter().map(|b| b.lower).min().unwrap_or(0);
    let t1 = buffers
        .iter()
        .map(|b| b.upper)
        .max()
        .unwrap_or(1)
        .max(t0 + 1);
    let top = plan.peak.max(cap.unwrap_or(0)).max(lb).max(1);
    let x = |t: u64| margin + (t - t0) as f64 / (t1 - t0) as f64 * (w - 2.0 * margin);
    let y = |a: u64| h - margin - a as f64 / top as f64 * (h - 2.0 * margin);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{margin}\" y=\"20\">{} buffers, peak {} bytes, lower bound {} bytes ({:+.3}%); time → , address ↑</text>\n",
        buffers.len(),
        plan.peak,
        lb,
        gap(plan.peak, lb) * 100.0
    );
    for (i, b) in buffers.iter().enumerate() {
        let o = plan.offsets[i];
        let hue = (i as u64).wrapping_mul(2654435761) % 360;
        let (x0, x1) = (x(b.lower), x(b.upper));
        let (y0, y1) = (y(o + b.size), y(o));
        out.push_str(&format!(
            "<rect x=\"{x0:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"hsl({hue},65%,65%)\" stroke=\"black\" stroke-width=\"0.3\"><title>{} [{}, {}) bytes [{}, {})</title></rect>\n",
            (x1 - x0).max(0.5),
            (y1 - y0).max(0.5),
            xml_escape(&ids[i]),
            b.lower,
            b.upper,
            o,
            o + b.size
        ));
    }
    let mut line = |a: u64, colour: &str, label: &str| {
        let (ya, x_end) = (y(a), w - margin);
        let (tx, ty) = (w - margin - 120.0, y(a) - 3.0);
        out.push_str(&format!(
            "<line x1=\"{margin}\" x2=\"{x_end:.2}\" y1=\"{ya:.2}\" y2=\"{ya:.2}\" stroke=\"{colour}\" stroke-dasharray=\"6 3\"/><text x=\"{tx:.2}\" y=\"{ty:.2}\" fill=\"{colour}\">{label}</text>\n"
        ));
    };
    line(lb, "blue", "lower bound");
    if let Some(c) = cap {
        line(c, "red", "capacity");
    }
    out.push_str("</svg>\n");
    out
}
