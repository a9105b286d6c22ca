//! Sample graphs for tests: an attention chain and a feed-forward block to tile, and the check
//! that a graph declares no tensor it does not use.
//!
//! The tiling unit tests and the conformance suite's tiling cases build the same chain and check
//! the same property; this module holds them once. Test support, not API: compiled only with the
//! `test-support` feature (the conformance suite enables it) and in core's own tests.

use std::ops::Range;

use super::{Graph, TensorId, TensorKind};
use crate::Result;
use crate::ops::samples::Rng;
use crate::ops::{DType, Op, WeightFormat};

/// A sample graph with a chain to tile and the data to run it: its inputs, the chain, and a
/// scale after the chain that reads the chain's result and is the graph's output.
pub struct Sample {
    /// The graph.
    pub graph: Graph,
    /// Every input with its data.
    pub inputs: Vec<(TensorId, Vec<f32>)>,
    /// The graph's output.
    pub out: TensorId,
    /// The chain's nodes: what [`Graph::tile`] tiles.
    pub chain: Range<usize>,
}

/// The attention sample ([`attention`]): q, k, v and a mask in; scores, masked softmax and
/// context (the chain).
pub type Attention = Sample;

/// Attention over `b` sentences of `s` tokens, `h` heads of `d`, with deterministic data from
/// `seed`. Sentence `j` pads its last `j % 4` keys (the first pads none), so the mask differs
/// per sentence; `s` must exceed 3 so that no sentence is all padding.
///
/// # Errors
/// As [`Graph::op`] (shapes whose sizes overflow).
pub fn attention(b: usize, s: usize, h: usize, d: usize, seed: u64) -> Result<Attention> {
    let bh = b * h;
    let len = (bh * s * d) as u32;
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[bh, s, d]);
    let k = g.input("k", DType::F32, &[bh, s, d]);
    let v = g.input("v", DType::F32, &[bh, s, d]);
    let mask = g.input("mask", DType::F32, &[b, s]);
    let pre = g.op(Op::Relu { len }, &[q], &[bh, s, d], "pre")?;
    let first = g.nodes().len();
    let mm = |n: usize, k: usize, trans_b: bool, alpha: f32| Op::MatMul {
        batch: bh as u32,
        m: s as u32,
        n: n as u32,
        k: k as u32,
        trans_a: false,
        trans_b,
        broadcast_b: false,
        bias: false,
        alpha,
        weight_format: WeightFormat::F32,
    };
    let alpha = 1.0 / (d as f32).sqrt();
    let scores = g.op(mm(s, d, true, alpha), &[pre, k], &[bh, s, s], "scores")?;
    let softmax = Op::Softmax {
        rows: (bh * s) as u32,
        cols: s as u32,
        masked: true,
        rows_per_mask: (h * s) as u32,
    };
    let probs = g.op(softmax, &[scores, mask], &[bh, s, s], "probs")?;
    let ctx = g.op(mm(d, s, false, 1.0), &[probs, v], &[bh, s, d], "context")?;
    let chain = first..g.nodes().len();
    let out = g.op(Op::Scale { len, alpha: 0.5 }, &[ctx], &[bh, s, d], "after")?;
    g.output(out);
    let mut rng = Rng::new(seed);
    let mut data = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.f32()).collect() };
    let n = bh * s * d;
    let (qd, kd, vd) = (data(n), data(n), data(n));
    let m: Vec<f32> = (0..b * s)
        .map(|i| if i % s + (i / s) % 4 >= s { 0.0 } else { 1.0 })
        .collect();
    Ok(Attention {
        inputs: vec![(q, qd), (k, kd), (v, vd), (mask, m)],
        graph: g,
        out,
        chain,
    })
}

/// A feed-forward block over `rows` tokens of width `h` with an intermediate width `ff`, and
/// deterministic data from `seed`: a relu makes `x`; then the chain up-projection (`x·W1ᵀ + b1`),
/// gelu, down-projection (`·W2ᵀ + b2`), residual (`+ x`) and layer norm; a scale after the chain
/// is the graph's output. Every operand is an input (the weights too), set from the data.
///
/// # Errors
/// As [`Graph::op`].
pub fn feed_forward(rows: usize, h: usize, ff: usize, seed: u64) -> Result<Sample> {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[rows, h]);
    let w1 = g.input("w1", DType::F32, &[ff, h]);
    let b1 = g.input("b1", DType::F32, &[ff]);
    let w2 = g.input("w2", DType::F32, &[h, ff]);
    let b2 = g.input("b2", DType::F32, &[h]);
    let gamma = g.input("gamma", DType::F32, &[h]);
    let beta = g.input("beta", DType::F32, &[h]);
    let len = |n: usize| (rows * n) as u32;
    let pre = g.op(Op::Relu { len: len(h) }, &[x], &[rows, h], "pre")?;
    let first = g.nodes().len();
    let linear = |n: usize, k: usize| Op::linear(rows as u32, n as u32, k as u32);
    let up = g.op(linear(ff, h), &[pre, w1, b1], &[rows, ff], "up")?;
    let act = g.op(Op::Gelu { len: len(ff) }, &[up], &[rows, ff], "gelu")?;
    let down = g.op(linear(h, ff), &[act, w2, b2], &[rows, h], "down")?;
    let add = Op::Add {
        len: len(h),
        b_len: len(h),
    };
    let res = g.op(add, &[down, pre], &[rows, h], "residual")?;
    let norm = Op::LayerNorm {
        rows: rows as u32,
        cols: h as u32,
        eps: 1e-12,
    };
    let normed = g.op(norm, &[res, gamma, beta], &[rows, h], "norm")?;
    let chain = first..g.nodes().len();
    let out = g.op(
        Op::Scale {
            len: len(h),
            alpha: 0.5,
        },
        &[normed],
        &[rows, h],
        "after",
    )?;
    g.output(out);
    let mut rng = Rng::new(seed);
    let mut data = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.f32()).collect() };
    let inputs = vec![
        (x, data(rows * h)),
        (w1, data(ff * h)),
        (b1, data(ff)),
        (w2, data(h * ff)),
        (b2, data(h)),
        (gamma, data(h)),
        (beta, data(h)),
    ];
    Ok(Sample {
        inputs,
        graph: g,
        out,
        chain,
    })
}

/// The tensors of `g` nothing uses, by index: neither an input nor a weight (the caller's to
/// set), nor an output, nor bound by a node, nor the storage of a tensor a node binds. Empty for a
/// graph without dead declarations, which [`Graph::tile`] keeps so.
pub fn unused_tensors(g: &Graph) -> Vec<usize> {
    let mut used: Vec<bool> = g
        .tensors()
        .iter()
        .map(|t| t.kind != TensorKind::Intermediate)
        .collect();
    let bound = g
        .nodes()
        .iter()
        .flat_map(|n| n.inputs.iter().chain(std::iter::once(&n.output)));
    for &t in bound.chain(g.outputs()) {
        for u in [t, g.root(t)] {
            if let Some(x) = used.get_mut(u.index()).filter(|_| g.contains(u)) {
                *x = true;
            }
        }
    }
    (0..used.len()).filter(|&i| !used[i]).collect()
}
