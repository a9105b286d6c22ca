//! The five allocation traces of issue 14, as allocate/free event streams, and a sixth: the
//! eager prefills without flash attention, whose attention scores grow with the square of the
//! sequence length (the dynamic-shape case a plan stretched linearly does not cover).
//!
//! Ports of `shared/data/traces/gen/tracegen.py` (standard library Python, seeded):
//! * `rand_logu`: its algorithm with a seeded xorshift generator instead of Python's Mersenne
//!   Twister (same distribution, different draws; the `suballoc` bench does the same);
//! * `xfmr_eager`, `xfmr_eager_sdpa` and `llama8b_prefill`: `xfmr_infer` ported exactly (the
//!   Llama-8B rows equal `derived/llama8b_prefill_s2048_bf16_flash.csv`; `xfmr_eager_sdpa` is
//!   its `--no-flash` attention), the eager pass lengths drawn by xorshift;
//! * `gpt2s_train` and `mobilenet_v2`: the committed DSA instances in `data/` (copies of
//!   `derived/*.csv`, byte-identical to the generator's output), replayed online as its
//!   `dsa2events --repeat K` does (at one time step, frees before allocations).

use std::collections::HashMap;

use crate::rng::Rng;

/// One request of a trace. Ids are dense (`0..allocations`), so replays index a `Vec`.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// `true`: allocate `size` bytes under `id`; `false`: free `id`.
    pub alloc: bool,
    /// The allocation this event creates or frees.
    pub id: u32,
    /// Requested bytes (repeated on the free).
    pub size: u64,
}

/// A named trace.
pub struct Trace {
    /// Short name, used for the SVG file and the table.
    pub name: &'static str,
    /// What it models, for the table.
    pub what: String,
    /// The events in order.
    pub events: Vec<Event>,
    /// Allocations in the trace (ids are `0..allocations`).
    pub allocations: usize,
    /// Index of the first event of each step (one model run), ascending; empty for a trace
    /// without steps. A step ends where the next begins, the last at the end of the trace.
    pub steps: Vec<usize>,
}

impl Trace {
    fn new(name: &'static str, what: String, (events, steps): (Vec<Event>, Vec<usize>)) -> Self {
        let allocations = events.iter().filter(|e| e.alloc).count();
        Trace {
            name,
            what,
            events,
            allocations,
            steps,
        }
    }

    /// Live requested bytes after each event.
    pub fn live(&self) -> Vec<u64> {
        let mut live = 0u64;
        self.events
            .iter()
            .map(|e| {
                if e.alloc {
                    live += e.size;
                } else {
                    live -= e.size;
                }
                live
            })
            .collect()
    }
}

/// Every trace, in the order.
///
/// # Errors
/// A committed DSA instance that does not parse.
pub fn all() -> Result<Vec<Trace>, String> {
    let gpt2 = parse_dsa(include_str!("data/gpt2s_train_b8_s1024_bf16.csv"))?;
    let mobilenet = parse_dsa(include_str!("data/mobilenet_v2_224_fp32.csv"))?;
    let llama = xfmr_infer(&Llama::LLAMA_8B, 2048, true);
    Ok(vec![
        Trace::new(
            "rand_logu",
            "log-uniform 256 B-64 MiB, 8 GiB expected live, 100k churn pairs".into(),
            (rand_logu(0x5EED, 100_000), Vec::new()),
        ),
        Trace::new(
            "xfmr_eager",
            "eager prefills, 16-layer Llama-style model, 200 seq lengths 16-4096".into(),
            xfmr_eager(1, 200, true),
        ),
        Trace::new(
            "gpt2s_train",
            "gpt2-small training step (b8 s1024 bf16) x10".into(),
            dsa_events(&gpt2, 10, 256),
        ),
        Trace::new(
            "llama8b_prefill",
            "llama-8B prefill (s2048 bf16 flash) x10".into(),
            dsa_events(&llama, 10, 256),
        ),
        Trace::new(
            "mobilenet_v2",
            "mobilenet_v2 224 fp32 inference x100".into(),
            dsa_events(&mobilenet, 100, 256),
        ),
        Trace::new(
            "xfmr_eager_sdpa",
            "xfmr_eager without flash attention: scores and probs of seq^2 x heads".into(),
            xfmr_eager(1, 200, false),
        ),
    ])
}

/// One buffer of a DSA instance: lifetime `[lower, upper)` in op steps, size in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    lower: u64,
    upper: u64,
    size: u64,
}

/// Parses a MiniMalloc CSV (`id,lower,upper,size`, one header line).
fn parse_dsa(text: &str) -> Result<Vec<Row>, String> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<u64> = line
                .split(',')
                .map(|x| x.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("DSA line '{line}': {e}"))?;
            match f[..] {
                [_, lower, upper, size] if lower < upper => Ok(Row { lower, upper, size }),
                _ => Err(format!("DSA line '{line}': want id,lower<upper,size")),
            }
        })
        .collect()
}

fn align_up(size: u64, align: u64) -> u64 {
    size.div_ceil(align) * align
}

/// `dsa2events --repeat`: iteration `k` starts at `k * span`; at one time, frees before
/// allocations; ties keep row order (stable sort, as Python's). Each iteration is a step (every
/// lifetime ends before `span`, so no allocation outlives its iteration).
fn dsa_events(rows: &[Row], repeat: u32, align: u64) -> (Vec<Event>, Vec<usize>) {
    let span = rows.iter().map(|r| r.upper).max().unwrap_or(0) + 1;
    let n = rows.len() as u32;
    let mut out = Vec::with_capacity(2 * rows.len() * repeat as usize);
    let mut steps = Vec::with_capacity(repeat as usize);
    for k in 0..repeat {
        steps.push(out.len());
        let mut timed = Vec::with_capacity(2 * rows.len());
        for (i, r) in rows.iter().enumerate() {
            let id = k * n + i as u32;
            let size = align_up(r.size, align);
            let t = u64::from(k) * span;
            timed.push((
                t + r.lower,
                1,
                Event {
                    alloc: true,
                    id,
                    size,
                },
            ));
            timed.push((
                t + r.upper,
                0,
                Event {
                    alloc: false,
                    id,
                    size,
                },
            ));
        }
        timed.sort_by_key(|&(t, order, _)| (t, order));
        out.extend(timed.into_iter().map(|(_, _, e)| e));
    }
    (out, steps)
}

/// `rand_logu`: warm up to half of 16 GiB expected live (sizes log-uniform 256 B-64 MiB, multiples
/// of 256), then `pairs` times free a uniformly random live allocation and allocate a new one.
fn rand_logu(seed: u64, pairs: usize) -> Vec<Event> {
    const LO: u64 = 256;
    const HI: u64 = 64 << 20;
    const CAP: f64 = (16u64 << 30) as f64;
    let mut rng = Rng(seed);
    let mean = (HI - LO) as f64 / (HI as f64 / LO as f64).ln();
    let live_n = (0.5 * CAP / mean) as usize;
    let mut events = Vec::with_capacity(live_n + 2 * pairs);
    let mut live = Vec::with_capacity(live_n);
    let mut next = 0u32;
    let mut alloc = |rng: &mut Rng, events: &mut Vec<Event>| {
        let size = align_up(rng.log_uniform(LO, HI), 256);
        let e = Event {
            alloc: true,
            id: next,
            size,
        };
        next += 1;
        events.push(e);
        e
    };
    for _ in 0..live_n {
        let e = alloc(&mut rng, &mut events);
        live.push(e);
    }
    for _ in 0..pairs {
        let i = (rng.next_u64() % live.len() as u64) as usize;
        events.push(Event {
            alloc: false,
            ..live[i]
        });
        live[i] = alloc(&mut rng, &mut events);
    }
    events
}

/// A Llama-style decoder (GQA, SwiGLU), bf16, batch 1.
struct Llama {
    layers: u32,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    ffn: u64,
}

impl Llama {
    /// `xfmr_infer`'s defaults.
    const LLAMA_8B: Llama = Llama {
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn: 14336,
    };
    /// `xfmr_eager`'s model.
    const EAGER: Llama = Llama {
        layers: 16,
        hidden: 2048,
        heads: 32,
        kv_heads: 8,
        ffn: 8192,
    };
}

/// `tracegen.py`'s `Graph`: a linear op schedule; a tensor lives from its producing op to its last
/// reader, inclusive.
#[derive(Default)]
struct Graph {
    t: u64,
    rows: Vec<Row>,
    index: HashMap<String, usize>,
}

impl Graph {
    fn op(&mut self, outputs: &[(String, u64)], inputs: &[&str]) {
        for name in inputs {
            let row = &mut self.rows[self.index[*name]];
            row.upper = row.upper.max(self.t + 1);
        }
        for (name, size) in outputs {
            self.index.insert(name.clone(), self.rows.len());
            self.rows.push(Row {
                lower: self.t,
                upper: self.t + 1,
                size: *size,
            });
        }
        self.t += 1;
    }
}

/// `xfmr_infer`: one prefill's activations, sizes aligned to 256 bytes. Without `flash` the
/// attention materialises its scores and their softmax, `heads × seq²` each.
fn xfmr_infer(m: &Llama, seq: u64, flash: bool) -> Vec<Row> {
    const DTYPE: u64 = 2;
    let head_dim = m.hidden / m.heads;
    let act = seq * m.hidden * DTYPE;
    let kv = seq * m.kv_heads * head_dim * DTYPE;
    let ffn = seq * m.ffn * DTYPE;
    let mut g = Graph::default();
    let o = |name: &str, size: u64| (name.to_string(), size);
    g.op(&[o("x0", act)], &[]);
    let mut x = "x0".to_string();
    for l in 0..m.layers {
        let n = |s: &str| format!("L{l}_{s}");
        g.op(&[o(&n("n1"), act)], &[&x]);
        g.op(&[o(&n("q"), act)], &[&n("n1")]);
        g.op(&[o(&n("k"), kv)], &[&n("n1")]);
        g.op(&[o(&n("v"), kv)], &[&n("n1")]);
        g.op(&[o(&n("qr"), act), o(&n("kr"), kv)], &[&n("q"), &n("k")]);
        if flash {
            g.op(&[o(&n("attn"), act)], &[&n("qr"), &n("kr"), &n("v")]);
        } else {
            let scores = m.heads * seq * seq * DTYPE;
            g.op(&[o(&n("scores"), scores)], &[&n("qr"), &n("kr")]);
            g.op(&[o(&n("probs"), scores)], &[&n("scores")]);
            g.op(&[o(&n("attn"), act)], &[&n("probs"), &n("v")]);
        }
        g.op(&[o(&n("o"), act)], &[&n("attn")]);
        g.op(&[o(&n("r1"), act)], &[&x, &n("o")]);
        g.op(&[o(&n("n2"), act)], &[&n("r1")]);
        g.op(&[o(&n("gate"), ffn)], &[&n("n2")]);
        g.op(&[o(&n("up"), ffn)], &[&n("n2")]);
        g.op(&[o(&n("swiglu"), ffn)], &[&n("gate"), &n("up")]);
        g.op(&[o(&n("down"), act)], &[&n("swiglu")]);
        g.op(&[o(&n("r2"), act)], &[&n("r1"), &n("down")]);
        x = n("r2");
    }
    g.op(&[o("norm", act)], &[&x]);
    g.op(&[o("logits_last", 128_256 * 4)], &["norm"]);
    // `g.use("logits_last")`: extends it to the current step.
    let t = g.t;
    let last = g.index["logits_last"];
    g.rows[last].upper = g.rows[last].upper.max(t + 1);
    for r in &mut g.rows {
        r.size = align_up(r.size, 256);
    }
    g.rows
}

/// `xfmr_eager`: `iters` prefills of [`Llama::EAGER`], each with a sequence length log-uniform in
/// 16..4096, every pass's activations allocated in op order and freed after last use. Each pass
/// is a step.
fn xfmr_eager(seed: u64, iters: u32, flash: bool) -> (Vec<Event>, Vec<usize>) {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    let mut steps = Vec::with_capacity(iters as usize);
    let mut base = 0u32;
    for _ in 0..iters {
        let seq = rng.log_uniform(16, 4096);
        let rows = xfmr_infer(&Llama::EAGER, seq, flash);
        let n = rows.len() as u32;
        steps.push(out.len());
        out.extend(dsa_events(&rows, 1, 256).0.into_iter().map(|e| Event {
            id: e.id + base,
            ..e
        }));
        base += n;
    }
    (out, steps)
}
