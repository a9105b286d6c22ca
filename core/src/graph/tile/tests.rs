//! The tiling pass: a tiled attention chain computes the untiled graph's outputs bit for bit
//! (plain and budgeted compiles, on the host backend), shrinks the largest op, and a chain the pass
//! cannot tile leaves the graph as it was.

use std::sync::Arc;

use super::*;
use crate::ops::{DType, Op, WeightFormat};
use crate::{CompileDesc, HostBackend, HostConfig, Model, Runtime, RuntimeConfig, offload::Score};

/// Attention over `b` sentences of `s` tokens, `h` heads of `d`: q, k, v and a mask in; scores,
/// masked softmax, context; a scale after the chain reads the context. Returns the graph, its
/// inputs and output, and the chain's node range.
struct Attention {
    g: Graph,
    inputs: Vec<(TensorId, Vec<f32>)>,
    out: TensorId,
    chain: Range<usize>,
}

fn attention(b: usize, s: usize, h: usize, d: usize) -> Attention {
    let mut g = Graph::new();
    let bh = b * h;
    let q = g.input("q", DType::F32, &[bh, s, d]);
    let k = g.input("k", DType::F32, &[bh, s, d]);
    let v = g.input("v", DType::F32, &[bh, s, d]);
    let mask = g.input("mask", DType::F32, &[b, s]);
    let pre = g
        .op(
            Op::Relu {
                len: (bh * s * d) as u32,
            },
            &[q],
            &[bh, s, d],
            "pre",
        )
        .unwrap();
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
    let scores = g
        .op(mm(s, d, true, 0.25), &[pre, k], &[bh, s, s], "scores")
        .unwrap();
    let softmax = Op::Softmax {
        rows: (bh * s) as u32,
        cols: s as u32,
        masked: true,
        rows_per_mask: (h * s) as u32,
    };
    let probs = g
        .op(softmax, &[scores, mask], &[bh, s, s], "probs")
        .unwrap();
    let ctx = g
        .op(mm(d, s, false, 1.0), &[probs, v], &[bh, s, d], "context")
        .unwrap();
    let chain = first..g.nodes().len();
    let out = g
        .op(
            Op::Scale {
                len: (bh * s * d) as u32,
                alpha: 0.5,
            },
            &[ctx],
            &[bh, s, d],
            "after",
        )
        .unwrap();
    g.output(out);
    let data = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                    / 16_777_216.0
                    - 0.5
            })
            .collect()
    };
    let mut m = vec![1.0f32; b * s];
    for (i, x) in m.iter_mut().enumerate() {
        if i % s >= s - 1 - (i / s) % 3 {
            *x = 0.0; // padded keys, a different count per sentence
        }
    }
    Attention {
        inputs: vec![
            (q, data(bh * s * d, 1)),
            (k, data(bh * s * d, 2)),
            (v, data(bh * s * d, 3)),
            (mask, m),
        ],
        g,
        out,
        chain,
    }
}

fn runtime(force_staging: bool) -> Runtime {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = RuntimeConfig {
        force_staging,
        ..RuntimeConfig::default()
    };
    Runtime::new(host, config).unwrap()
}

fn run(model: &mut Model, a: &Attention) -> Vec<u32> {
    for (t, data) in &a.inputs {
        model.set_input(*t, bytemuck::cast_slice(data)).unwrap();
    }
    model.run().unwrap();
    let got: Vec<f32> = model.read_output(a.out).unwrap();
    got.iter().map(|x| x.to_bits()).collect()
}

/// The largest bytes one op of `g` labelled with `part` binds.
fn largest_op(g: &Graph, part: &str) -> u64 {
    g.nodes()
        .iter()
        .filter(|n| n.label.contains(part))
        .map(|n| {
            n.inputs
                .iter()
                .chain(std::iter::once(&n.output))
                .map(|&t| g.decl(t).unwrap().size().unwrap())
                .sum()
        })
        .max()
        .unwrap()
}

#[test]
fn a_tiled_attention_chain_equals_the_untiled_one_bit_for_bit() {
    let rt = runtime(false);
    let whole = attention(4, 8, 3, 4);
    let mut plain = rt.compile(&whole.g).unwrap();
    let want = run(&mut plain, &whole);
    let plain = plain.memory_report();
    let softmax = largest_op(&whole.g, "probs");
    for parts in [1u32, 2, 4] {
        let mut a = attention(4, 8, 3, 4);
        a.g.tile(a.chain.clone(), parts).unwrap();
        assert_eq!(a.g.nodes().len(), 1 + 3 * parts as usize + 1);
        if parts > 1 {
            assert_eq!(a.g.nodes()[1].label, "scores.part0");
            // Every op of the chain binds at most the untiled softmax's bytes over the parts.
            assert_eq!(largest_op(&a.g, ".part"), softmax / u64::from(parts));
        }
        let mut model = rt.compile(&a.g).unwrap();
        assert_eq!(run(&mut model, &a), want, "{parts} parts");
        let tiled = model.memory_report();
        if parts > 1 {
            assert!(
                tiled.activation_planned_bytes < plain.activation_planned_bytes,
                "tiling shrinks the planned arena: {} vs {}",
                tiled.activation_planned_bytes,
                plain.activation_planned_bytes
            );
        }
    }
}

/// The budget the untiled graph cannot meet (its scores and softmax bind more) runs once tiled, with
/// every copy staged as on a discrete device, bit-identical.
#[test]
fn a_budget_below_the_untiled_softmax_runs_once_tiled() {
    let rt = runtime(true);
    let whole = attention(4, 32, 3, 4);
    let mut plain = rt.compile(&whole.g).unwrap();
    let want = run(&mut plain, &whole);
    let need = plain.memory_report().unbudgeted_device_bytes();
    drop(plain);
    let desc = CompileDesc {
        device_budget: Some(need / 2),
        min_offload_size: 0,
        scores: vec![Score::Area],
        ..CompileDesc::default()
    };
    match rt.compile_with(&whole.g, &desc) {
        Err(Error::BudgetBelowWorkingSet { op, .. }) => {
            assert!(["scores", "probs"].contains(&op.as_str()), "{op}");
        }
        Ok(_) => panic!("the untiled chain fits half the need: the test proves nothing"),
        Err(e) => panic!("{e}"),
    }
    let mut a = attention(4, 32, 3, 4);
    a.g.tile(a.chain.clone(), 4).unwrap();
    let mut model = rt.compile_with(&a.g, &desc).unwrap();
    assert_eq!(run(&mut model, &a), want);
    assert_eq!(
        run(&mut model, &a),
        want,
        "a second run over the first's bytes"
    );
    assert!(model.memory_report().peak_device_bytes <= need / 2);
}

#[test]
fn a_chain_the_pass_cannot_tile_leaves_the_graph_as_it_was() {
    let check = |g: &Graph, range: Range<usize>, parts: u32, says: &str| {
        let mut t = g.clone();
        let err = t.tile(range, parts).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        assert_eq!(t.nodes().len(), g.nodes().len());
        assert_eq!(t.tensors().len(), g.tensors().len());
    };
    let a = attention(4, 8, 3, 4);
    check(&a.g, a.chain.clone(), 0, "zero parts");
    check(&a.g, 3..3, 2, "non-empty range");
    check(&a.g, 0..9, 2, "non-empty range");
    // The softmax has 4 units (one per mask row): 3 parts do not divide them.
    check(&a.g, a.chain.clone(), 3, "not a multiple of 3 parts");
    // A broadcast operand is bound whole by every part: when the chain produces it a part at a
    // time, no part could read it.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8]);
    let s = g.input("s", DType::F32, &[2]);
    let r = g.op(Op::Relu { len: 2 }, &[s], &[2], "relu").unwrap();
    let y = g
        .op(Op::Add { len: 8, b_len: 2 }, &[x, r], &[8], "add")
        .unwrap();
    g.output(y);
    check(&g, 0..2, 2, "reads 'relu' other than a part at a time");
    // The same add alone tiles: its broadcast operand comes from outside the chain.
    g.tile(1..2, 2).unwrap();
    assert_eq!(g.nodes().len(), 3);
}

/// Regression: a chain tiled as soon as it was appended (before the op that reads its result)
/// wrote its result into per-part tensors no later op read, and compile refused the graph ("reads
/// tensor N before any op writes it"): the chain's last output is exported, read later or not.
#[test]
fn a_chain_tiled_before_its_readers_exist_still_fills_its_result() {
    let rt = runtime(false);
    let whole = attention(4, 8, 3, 4);
    let want = run(&mut rt.compile(&whole.g).unwrap(), &whole);
    let mut g = whole.g.clone();
    // Rebuild: the same nodes, tiled before "after" is appended.
    let after = g.nodes()[whole.chain.end].clone();
    let mut early = Graph::new();
    std::mem::swap(&mut early, &mut g);
    early.nodes.truncate(whole.chain.end);
    early.outputs.clear();
    early.tile(whole.chain.clone(), 2).unwrap();
    early.nodes.push(after);
    early.output(whole.out);
    let mut model = rt.compile(&early).unwrap();
    let a = Attention { g: early, ..whole };
    assert_eq!(run(&mut model, &a), want);
}
