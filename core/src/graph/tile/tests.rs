//! The tiling pass: a tiled attention chain computes the untiled graph's outputs bit for bit
//! (plain and budgeted compiles, on the host backend), shrinks the largest op, and a chain the pass
//! cannot tile leaves the graph as it was.

use std::sync::Arc;

use super::*;
use crate::graph::samples::{self, Attention, unused_tensors};
use crate::ops::{DType, Op};
use crate::{CompileDesc, HostBackend, HostConfig, Model, Runtime, RuntimeConfig, offload::Score};

fn attention(b: usize, s: usize, h: usize, d: usize) -> Attention {
    samples::attention(b, s, h, d, 1).unwrap()
}

fn runtime(force_staging: bool) -> Runtime {
    runtime_with(force_staging, std::time::Duration::ZERO)
}

/// A host runtime whose transfer lane spends `transfer_delay` more on every copy.
fn runtime_with(force_staging: bool, transfer_delay: std::time::Duration) -> Runtime {
    let config = HostConfig {
        transfer_delay,
        ..HostConfig::default()
    };
    let host = Arc::new(HostBackend::new(config).unwrap());
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
    let mut plain = rt.compile(&whole.graph).unwrap();
    let want = run(&mut plain, &whole);
    let plain = plain.memory_report();
    let softmax = largest_op(&whole.graph, "probs");
    for parts in [1u32, 2, 4] {
        let mut a = attention(4, 8, 3, 4);
        a.graph.tile(a.chain.clone(), parts).unwrap();
        assert_eq!(a.graph.nodes().len(), 1 + 3 * parts as usize + 1);
        if parts > 1 {
            assert_eq!(a.graph.nodes()[1].label, "scores.part0");
            // Every op of the chain binds at most the untiled softmax's bytes over the parts.
            assert_eq!(largest_op(&a.graph, ".part"), softmax / u64::from(parts));
        }
        let mut model = rt.compile(&a.graph).unwrap();
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

/// A host runtime with every copy staged, and the untiled 4×32 attention's output bits and
/// unbudgeted device bytes.
fn staged_attention_baseline() -> (Runtime, Vec<u32>, u64) {
    let rt = runtime(true);
    let whole = attention(4, 32, 3, 4);
    let mut plain = rt.compile(&whole.graph).unwrap();
    let want = run(&mut plain, &whole);
    let need = plain.memory_report().unbudgeted_device_bytes();
    drop(plain);
    (rt, want, need)
}

/// The budget the untiled graph cannot meet (its scores and softmax bind more) runs once tiled, with
/// every copy staged as on a discrete device, bit-identical.
#[test]
fn a_budget_below_the_untiled_softmax_runs_once_tiled() {
    let (rt, want, need) = staged_attention_baseline();
    let desc = CompileDesc {
        device_budget: Some(need / 2),
        min_offload_size: 0,
        scores: vec![Score::Area],
        ..CompileDesc::default()
    };
    match rt.compile_with(&attention(4, 32, 3, 4).graph, &desc) {
        Err(Error::BudgetBelowWorkingSet { op, .. }) => {
            assert!(["scores", "probs"].contains(&op.as_str()), "{op}");
        }
        Ok(_) => panic!("the untiled chain fits half the need: the test proves nothing"),
        Err(e) => panic!("{e}"),
    }
    let mut a = attention(4, 32, 3, 4);
    a.graph.tile(a.chain.clone(), 4).unwrap();
    let mut model = rt.compile_with(&a.graph, &desc).unwrap();
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
        let typed = matches!(
            err,
            Error::Graph(crate::GraphError::Untileable { .. }) | Error::Argument(_)
        );
        assert!(typed, "{err}");
        assert!(err.to_string().contains(says), "{err}");
        assert_eq!(t.nodes().len(), g.nodes().len());
        assert_eq!(t.tensors().len(), g.tensors().len());
    };
    let a = attention(4, 8, 3, 4);
    check(&a.graph, a.chain.clone(), 0, "tile parts is 0");
    check(&a.graph, 3..3, 2, "non-empty range");
    check(&a.graph, 0..9, 2, "non-empty range");
    // The softmax has 4 units (one per mask row): 3 parts do not divide them.
    check(&a.graph, a.chain.clone(), 3, "not a multiple of 3 parts");
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
    let want = run(&mut rt.compile(&whole.graph).unwrap(), &whole);
    let mut g = whole.graph.clone();
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
    let a = Attention {
        graph: early,
        ..whole
    };
    assert_eq!(run(&mut model, &a), want);
}

/// Issue 17: the untiled chain's internal tensors stayed declared, unbound, after tiling. They are
/// removed; their ids are refused as stale while every other id keeps naming its tensor.
#[test]
fn a_tiled_graph_declares_no_tensor_it_does_not_use() {
    let whole = attention(4, 8, 3, 4);
    assert_eq!(unused_tensors(&whole.graph), Vec::<usize>::new());
    for parts in [2u32, 4] {
        let mut a = attention(4, 8, 3, 4);
        let node = |k: usize| a.graph.nodes()[a.chain.start + k].output;
        let (scores, probs, ctx) = (node(0), node(1), node(2));
        let before = a.graph.tensors().len();
        a.graph.tile(a.chain.clone(), parts).unwrap();
        assert_eq!(
            unused_tensors(&a.graph),
            Vec::<usize>::new(),
            "{parts} parts"
        );
        // Per part: views of k, v, mask, the pre-op's output and the context, and two part
        // tensors (scores, probs); the two untiled ones are gone.
        assert_eq!(a.graph.tensors().len(), before + 7 * parts as usize - 2);
        for gone in [scores, probs] {
            assert!(
                matches!(a.graph.decl(gone), Err(Error::StaleHandle { .. })),
                "{:?}",
                a.graph.decl(gone)
            );
            assert!(!a.graph.contains(gone));
        }
        assert_eq!(a.graph.decl(ctx).unwrap().name, "context");
        assert_eq!(a.graph.decl(a.out).unwrap().name, "after");
        for (t, _) in &a.inputs {
            assert_eq!(a.graph.decl(*t).unwrap().kind, TensorKind::Input);
        }
        // Every id a node binds names a live tensor of the graph.
        for n in a.graph.nodes() {
            for &t in n.inputs.iter().chain(std::iter::once(&n.output)) {
                a.graph.decl(t).unwrap();
            }
        }
    }
    // The check sees a dead declaration: a reshape nothing binds.
    let mut g = whole.graph.clone();
    let dead = g.reshape(whole.out, &[4 * 3 * 8 * 4]).unwrap();
    assert_eq!(unused_tensors(&g), vec![dead.index()]);
}

/// `x → relu → (a reshape of it) → scale → after`, the chain `relu, scale`, with `bind_reshape`:
/// whether the scale reads the relu's output through the reshape (else directly, the reshape
/// declared for a later reader). Returns the graph, its input, the relu's output and the reshape.
fn relu_scale(bind_reshape: bool) -> (Graph, TensorId, TensorId, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4, 8]);
    let r = g.op(Op::Relu { len: 32 }, &[x], &[4, 8], "relu").unwrap();
    let flat = g.reshape(r, &[32]).unwrap();
    let read = if bind_reshape { flat } else { r };
    let scaled = g
        .op(
            Op::Scale {
                len: 32,
                alpha: 3.0,
            },
            &[read],
            &[32],
            "scale",
        )
        .unwrap();
    let out = g
        .op(
            Op::Scale {
                len: 32,
                alpha: 0.5,
            },
            &[scaled],
            &[32],
            "after",
        )
        .unwrap();
    g.output(out);
    (g, x, r, flat, out)
}

fn run_one(rt: &Runtime, g: &Graph, x: TensorId, out: TensorId) -> Vec<u32> {
    let mut model = rt.compile(g).unwrap();
    let data: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
    model.set_input(x, bytemuck::cast_slice(&data)).unwrap();
    model.run().unwrap();
    let got: Vec<f32> = model.read_output(out).unwrap();
    got.iter().map(|v| v.to_bits()).collect()
}

/// A reshape of an internal tensor that the chain reads is bound, part by part, as a reshape of
/// the part tensor; the untiled tensor and its reshape are removed and the result is unchanged.
#[test]
fn a_reshape_the_chain_reads_is_removed_with_its_tensor() {
    let rt = runtime(false);
    let (mut g, x, r, flat, out) = relu_scale(true);
    let want = run_one(&rt, &g, x, out);
    g.tile(0..2, 2).unwrap();
    assert_eq!(unused_tensors(&g), Vec::<usize>::new());
    for gone in [r, flat] {
        assert!(matches!(g.decl(gone), Err(Error::StaleHandle { .. })));
    }
    let scale_part = &g.nodes()[1];
    assert_eq!(scale_part.label, "scale.part0");
    assert_eq!(g.decl(scale_part.inputs[0]).unwrap().shape, vec![16]);
    assert!(g.decl(scale_part.inputs[0]).unwrap().alias_of.is_some());
    assert_eq!(run_one(&rt, &g, x, out), want);
}

/// A reshape of an internal tensor that no op binds yet is declared for a later reader: the
/// tensor stays whole (filled a part at a time), and an op added after tiling reads it.
#[test]
fn a_reshape_declared_for_a_later_reader_keeps_its_tensor_whole() {
    let rt = runtime(false);
    let (untiled, x, _, flat, _) = relu_scale(false);
    let read_later = |g: &mut Graph| {
        let y = g.op(Op::Relu { len: 32 }, &[flat], &[32], "later").unwrap();
        g.output(y);
        y
    };
    let mut whole = untiled.clone();
    let y = read_later(&mut whole);
    let want = run_one(&rt, &whole, x, y);
    let mut g = untiled;
    g.tile(0..2, 2).unwrap();
    let y = read_later(&mut g);
    assert_eq!(unused_tensors(&g), Vec::<usize>::new());
    assert_eq!(run_one(&rt, &g, x, y), want);
}

/// A feed-forward block whose down-projection's `k` (640) is past the host's dot-kernel limit:
/// the whole product runs on `sgemm`, parts of fewer than 256 rows would run on the dot kernel.
fn feed_forward() -> samples::Sample {
    samples::feed_forward(512, 64, 640, 3).unwrap()
}

/// The feed-forward block split by rows of tokens (up-projection, gelu, down-projection,
/// residual, norm) computes the untiled block's output bit for bit, plainly and, with every copy
/// staged, within a budget the untiled block's gelu cannot meet; also when the copies land late
/// (a slow transfer lane: a kernel writing one part of a tensor must wait for the copy bringing
/// back its other parts).
#[test]
fn a_feed_forward_block_tiled_by_rows_equals_the_untiled_one_bit_for_bit() {
    for delay_ms in [0, 3] {
        feed_forward_within_a_budget(runtime_with(
            true,
            std::time::Duration::from_millis(delay_ms),
        ));
    }
}

fn feed_forward_within_a_budget(rt: Runtime) {
    let whole = feed_forward();
    let mut plain = rt.compile(&whole.graph).unwrap();
    let want = run(&mut plain, &whole);
    let need = plain.memory_report().unbudgeted_device_bytes();
    drop(plain);
    let gelu = largest_op(&whole.graph, "gelu");
    let mut a = feed_forward();
    a.graph.tile(a.chain.clone(), 2).unwrap();
    assert_eq!(a.graph.nodes().len(), 1 + 5 * 2 + 1);
    assert_eq!(unused_tensors(&a.graph), Vec::<usize>::new());
    assert_eq!(largest_op(&a.graph, "gelu.part"), gelu / 2);
    let mut model = rt.compile(&a.graph).unwrap();
    assert_eq!(run(&mut model, &a), want, "plain compile");
    drop(model);
    // Below the untiled gelu's operands (its input and output) plus the weights it must share
    // the device with: the untiled block is refused, naming an op of the chain.
    let budget = gelu - 1;
    let desc = CompileDesc {
        device_budget: Some(budget),
        min_offload_size: 0,
        scores: vec![Score::Area],
        ..CompileDesc::default()
    };
    assert!(budget < need);
    match rt.compile_with(&whole.graph, &desc) {
        Err(Error::BudgetBelowWorkingSet { op, .. }) => {
            assert!(["up", "gelu", "down"].contains(&op.as_str()), "{op}");
        }
        Ok(_) => panic!("the untiled block fits: the test proves nothing"),
        Err(e) => panic!("{e}"),
    }
    let mut model = rt.compile_with(&a.graph, &desc).unwrap();
    assert_eq!(run(&mut model, &a), want, "budgeted, staged");
    assert_eq!(
        run(&mut model, &a),
        want,
        "a second run over the first's bytes"
    );
    assert!(model.memory_report().peak_device_bytes <= budget);
}

/// Parts short enough to move the down-projection onto another host kernel would not be
/// bit-identical (`rows_split_exact`): the pass refuses them and leaves the graph as it was.
#[test]
fn a_row_split_that_changes_the_host_kernel_is_refused() {
    let whole = feed_forward();
    // 32 and 16 rows a part: the dot kernel's on every CPU, where the whole 512 rows are not.
    for parts in [16u32, 32] {
        let mut g = whole.graph.clone();
        let err = g.tile(whole.chain.clone(), parts).unwrap_err();
        assert!(
            matches!(err, Error::Graph(crate::GraphError::Untileable { .. })),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("'down'") && msg.contains("not bit-identical"),
            "{msg}"
        );
        assert_eq!(g.nodes().len(), whole.graph.nodes().len());
        assert_eq!(g.tensors().len(), whole.graph.tensors().len());
    }
}

/// Staged tiling: the parts read and write tensors of their own, copied from and into the
/// chain's edge tensors before the first part and after the last, so no op of a part binds a
/// view; the outputs stay bit-identical, plain and within a budget.
#[test]
fn a_staged_tiling_binds_no_views_and_equals_the_untiled_chain() {
    let (rt, want, need) = staged_attention_baseline();
    let mut a = attention(4, 32, 3, 4);
    let chain = a.chain.len();
    a.graph.tile_staged(a.chain.clone(), 4).unwrap();
    let nodes = a.graph.nodes();
    let copies: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.label.ends_with(".copy"))
        .collect();
    assert!(!copies.is_empty());
    assert_eq!(nodes.len() - copies.len(), 1 + chain * 4 + 1);
    for n in nodes
        .iter()
        .filter(|n| n.label.contains(".part") && !n.label.ends_with(".copy"))
    {
        for &t in n.inputs.iter().chain(std::iter::once(&n.output)) {
            let decl = a.graph.decl(t).unwrap();
            let per_part =
                decl.size().unwrap() < a.graph.decl(a.graph.root(t)).unwrap().size().unwrap();
            assert!(!per_part, "'{}' binds a slice of '{}'", n.label, decl.name);
        }
    }
    assert_eq!(unused_tensors(&a.graph), Vec::<usize>::new());
    let mut model = rt.compile(&a.graph).unwrap();
    assert_eq!(run(&mut model, &a), want, "plain compile");
    drop(model);
    let desc = CompileDesc {
        device_budget: Some(need / 2),
        min_offload_size: 0,
        scores: vec![Score::Area],
        ..CompileDesc::default()
    };
    let mut model = rt.compile_with(&a.graph, &desc).unwrap();
    assert_eq!(run(&mut model, &a), want, "budgeted");
    assert_eq!(
        run(&mut model, &a),
        want,
        "a second run over the first's bytes"
    );
}
