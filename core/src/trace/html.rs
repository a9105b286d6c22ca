//! The self-contained HTML memory timeline: one SVG chart per pool, every allocation a polygon
//! stacked over time in the spirit of PyTorch's memory viewer (an allocation sits on top of the
//! ones made before it and drops when one below it is freed). Hovering shows a `<title>` with
//! label, size and lifetime. A paged KV cache's events add a lane of its blocks (used and cached)
//! over the same axis. No script, no external resource: the file opens anywhere.
//!
//! The x axis is the event step (the index of an event in the trace), so bursts of activity stay
//! readable whatever their wall-clock duration; times are in the hover text.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::{EventKind, Trace};

/// One KV event for the lane: (event step, used, cached, tokens, hits, swapped).
type KvPoint = (usize, u64, u64, u64, u64, u64);

const WIDTH: f64 = 1100.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 90.0;

/// Escapes text for HTML/SVG content and attributes.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// `b` bytes in a binary unit up to EiB. `u128`: pool totals can pass `u64::MAX`.
fn bytes(b: u128) -> String {
    const UNITS: [(u32, &str); 6] = [
        (60, "EiB"),
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ];
    for (shift, unit) in UNITS {
        if b >= 1u128 << shift {
            return format!("{:.2} {unit}", b as f64 / (1u128 << shift) as f64);
        }
    }
    format!("{b} B")
}

/// A colour per id, spread around the hue circle.
fn colour(id: u64) -> String {
    let hue = (id.wrapping_mul(2_654_435_761) % 360) as u32;
    format!("hsl({hue},65%,58%)")
}

impl Trace {
    /// The trace as a self-contained HTML page (inline SVG, no scripts, no external resources).
    pub fn to_html(&self, title: &str) -> String {
        let n = self.events.len().max(1);
        let lifetimes = self.lifetimes();
        let mut out = String::new();
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
             body{{font-family:sans-serif;margin:16px;background:#fff;color:#222}}\
             polygon{{stroke:#333;stroke-width:0.3}}polygon:hover{{stroke:#000;stroke-width:1.5}}\
             h2{{font-size:16px;margin:18px 0 4px}}</style></head><body>\n<h1>{t}</h1>\n\
             <p>{} events, {} allocations. Hover an allocation for its label, size and lifetime.</p>\n",
            self.events.len(),
            lifetimes.len(),
            t = esc(title)
        );
        for pool in self.pools() {
            // Segments (x0, x1, base) per allocation, in allocation order.
            // Bases and totals are u128: the sizes of live allocations can sum past u64::MAX.
            let mut segs: Vec<Vec<(usize, usize, u128)>> = Vec::new();
            let mut live: Vec<(usize, usize, u128)> = Vec::new(); // (lifetime index, segment start, base)
            let mut order: HashMap<usize, usize> = HashMap::new(); // free step -> lifetime index
            let mut members: Vec<usize> = Vec::new();
            for (i, l) in lifetimes.iter().enumerate() {
                if l.pool == pool {
                    members.push(i);
                    if let Some(f) = l.free_step {
                        order.insert(f, i);
                    }
                }
            }
            let mut next = 0;
            let mut peak = 0u128;
            let mut total = 0u128;
            let mut seg_of: HashMap<usize, usize> = HashMap::new();
            for step in 0..self.events.len() {
                if let Some(&i) = members
                    .get(next)
                    .filter(|&&i| lifetimes[i].alloc_step == step)
                {
                    next += 1;
                    seg_of.insert(i, segs.len());
                    segs.push(Vec::new());
                    live.push((i, step, total));
                    total += u128::from(lifetimes[i].size);
                    peak = peak.max(total);
                } else if let Some(&i) = order.get(&step)
                    && let Some(pos) = live.iter().position(|e| e.0 == i)
                {
                    let size = u128::from(lifetimes[i].size);
                    let (_, start, base) = live.remove(pos);
                    segs[seg_of[&i]].push((start, step, base));
                    for e in live.iter_mut().skip(pos) {
                        segs[seg_of[&e.0]].push((e.1, step, e.2));
                        e.1 = step;
                        e.2 -= size;
                    }
                    total -= size;
                }
            }
            for (i, start, base) in live {
                segs[seg_of[&i]].push((start, n, base));
            }
            let scale = if peak == 0 { 0.0 } else { HEIGHT / peak as f64 };
            let xs = |s: usize| LEFT + s as f64 * WIDTH / n as f64;
            let ys = |b: u128| 10.0 + HEIGHT - b as f64 * scale;
            let _ = write!(
                out,
                "<h2>pool {} (peak {})</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">\n\
                 <rect x=\"{LEFT}\" y=\"10\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#f4f4f4\"/>\n\
                 <text x=\"4\" y=\"20\" font-size=\"11\">{}</text><text x=\"4\" y=\"{}\" font-size=\"11\">0</text>\n\
                 <text x=\"{LEFT}\" y=\"{}\" font-size=\"11\">event 0</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">event {}</text>\n",
                esc(&pool),
                bytes(peak),
                LEFT + WIDTH + 10.0,
                HEIGHT + 40.0,
                bytes(peak),
                HEIGHT + 10.0,
                HEIGHT + 28.0,
                LEFT + WIDTH,
                HEIGHT + 28.0,
                n
            );
            for &i in &members {
                let Some(&si) = seg_of.get(&i) else { continue };
                let l = &lifetimes[i];
                let s = &segs[si];
                let mut pts = String::new();
                for &(x0, x1, base) in s {
                    let _ = write!(
                        pts,
                        "{:.1},{:.1} {:.1},{:.1} ",
                        xs(x0),
                        ys(base),
                        xs(x1),
                        ys(base)
                    );
                }
                for &(x0, x1, base) in s.iter().rev() {
                    let top = base + u128::from(l.size);
                    let _ = write!(
                        pts,
                        "{:.1},{:.1} {:.1},{:.1} ",
                        xs(x1),
                        ys(top),
                        xs(x0),
                        ys(top)
                    );
                }
                let life = match (l.free_step, l.free_ns) {
                    (Some(f), Some(t)) => format!(
                        "freed at event {f} ({:.3} us); lived {:.3} us",
                        t as f64 / 1e3,
                        t.saturating_sub(l.alloc_ns) as f64 / 1e3
                    ),
                    _ => "never freed (leak)".into(),
                };
                let _ = writeln!(
                    out,
                    "<polygon points=\"{}\" fill=\"{}\"><title>{}\n{} ({} bytes) in pool {}, offset {}\nallocated at event {} ({:.3} us); {}\n{} use(s)</title></polygon>",
                    pts.trim_end(),
                    colour(l.id),
                    esc(if l.label.is_empty() {
                        "<unlabelled>"
                    } else {
                        &l.label
                    }),
                    bytes(u128::from(l.size)),
                    l.size,
                    esc(&l.pool),
                    l.offset,
                    l.alloc_step,
                    l.alloc_ns as f64 / 1e3,
                    life,
                    l.uses.len()
                );
            }
            out.push_str("</svg>\n");
        }
        self.kv_lane(&mut out);
        out.push_str("</body></html>\n");
        out
    }

    /// The KV cache's lane: blocks used (dark) and cached (light) over the event axis, when the
    /// trace has KV events.
    fn kv_lane(&self, out: &mut String) {
        let n = self.events.len().max(1);
        let points: Vec<KvPoint> = self
            .events
            .iter()
            .enumerate()
            .filter_map(|(step, e)| match e.kind {
                EventKind::Kv {
                    used,
                    cached,
                    tokens,
                    hits,
                    swapped,
                    ..
                } => Some((step, used, cached, tokens, hits, swapped)),
                _ => None,
            })
            .collect();
        let Some(&(_, _, _, _, hits, swapped)) = points.last() else {
            return;
        };
        let peak = points.iter().map(|p| p.1 + p.2).max().unwrap_or(0).max(1);
        let peak_used = points.iter().map(|p| p.1).max().unwrap_or(0);
        let peak_tokens = points.iter().map(|p| p.3).max().unwrap_or(0);
        let xs = |s: usize| LEFT + s as f64 * WIDTH / n as f64;
        let ys = |b: u64| 10.0 + HEIGHT - b as f64 * HEIGHT / peak as f64;
        let area = |top: &dyn Fn(&KvPoint) -> u64| {
            let mut pts = format!("{:.1},{:.1} ", xs(points[0].0), ys(0));
            for (i, p) in points.iter().enumerate() {
                let end = points.get(i + 1).map_or(n, |q| q.0);
                let y = ys(top(p));
                let _ = write!(pts, "{:.1},{y:.1} {:.1},{y:.1} ", xs(p.0), xs(end));
            }
            let _ = write!(pts, "{:.1},{:.1}", xs(n), ys(0));
            pts
        };
        let _ = write!(
            out,
            "<h2>kv cache (peak {peak_used} blocks used, {peak_tokens} tokens; {hits} prefix hits, \
             {swapped} blocks swapped)</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" \
             height=\"{}\">\n<rect x=\"{LEFT}\" y=\"10\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             fill=\"#f4f4f4\"/>\n<text x=\"4\" y=\"20\" font-size=\"11\">{peak} blocks</text>\n\
             <polygon points=\"{}\" fill=\"#b9d3ee\"><title>used + cached blocks</title></polygon>\n\
             <polygon points=\"{}\" fill=\"#3a6ea5\"><title>blocks used by sequences</title></polygon>\n</svg>\n",
            LEFT + WIDTH + 10.0,
            HEIGHT + 40.0,
            area(&|p| p.1 + p.2),
            area(&|p| p.1),
        );
    }
}
