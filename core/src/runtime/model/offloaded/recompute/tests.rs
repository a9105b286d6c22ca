use super::super::tests::{filled, run_twice, runtime, within};
use super::super::{CompileDesc, Model};
use crate::{DType, Graph, Op, TensorId};

const LEN: usize = 64 << 10; // 256 KiB of f32 per activation
const W: usize = 1 << 10; // 4 KiB weights: under the offload minimum, they never move

/// `a = relu(x)` branches off the input and is read by the first layer and by the last op (a
/// long absence whose producer's input, `x`, is always resident); in between, four layers
/// `h = (h + v_k) + (h + w_k)`, whose sums are the peak: `x`, `a`, both addends and `h`.
fn graph() -> (Graph, TensorId, Vec<TensorId>, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[LEN]);
    let a = g
        .op(Op::Relu { len: LEN as u32 }, &[x], &[LEN], "branch")
        .unwrap();
    let (y, weights) = layers(&mut g, a);
    (g, x, weights, y)
}

/// [`graph`] with a chain: `a = x + relu(e)` (a small second input `e` broadcast), so at the
/// residual `a`'s producer reads `x`, resident, and `relu(e)`, gone since: both are re-run.
fn chained_graph() -> (Graph, [TensorId; 2], Vec<TensorId>, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[LEN]);
    let e = g.input("e", DType::F32, &[W]);
    let s = g
        .op(Op::Relu { len: W as u32 }, &[e], &[W], "small")
        .unwrap();
    let add = Op::Add {
        len: LEN as u32,
        b_len: W as u32,
    };
    let a = g.op(add, &[x, s], &[LEN], "branch").unwrap();
    let (y, weights) = layers(&mut g, a);
    (g, [x, e], weights, y)
}

/// Four layers `h = (h + v_k) + (h + w_k)` from `a`, then `y = h + a`; returns `y` and the
/// weights.
fn layers(g: &mut Graph, a: TensorId) -> (TensorId, Vec<TensorId>) {
    let add = |b_len: usize| Op::Add {
        len: LEN as u32,
        b_len: b_len as u32,
    };
    let mut h = a;
    let mut weights = Vec::new();
    for k in 0..4 {
        let v = g.weight(&format!("v{k}"), DType::F32, &[W]);
        let w = g.weight(&format!("w{k}"), DType::F32, &[W]);
        weights.extend([v, w]);
        let p = g.op(add(W), &[h, v], &[LEN], &format!("addv{k}")).unwrap();
        let q = g.op(add(W), &[h, w], &[LEN], &format!("addw{k}")).unwrap();
        h = g.op(add(LEN), &[p, q], &[LEN], &format!("sum{k}")).unwrap();
    }
    let y = g.op(add(LEN), &[h, a], &[LEN], "residual").unwrap();
    g.output(y);
    (y, weights)
}

/// Sets the weights and the input, runs twice, returns the output's bits.
fn run(model: &mut Model, x: TensorId, weights: &[TensorId], y: TensorId) -> Vec<u32> {
    let weights = filled(weights, W, |k, i| ((i * 5 + k * 3) % 13) as f32 - 6.5);
    let input = (0..LEN).map(|i| (i % 23) as f32 * 0.37 - 4.0).collect();
    run_twice(model, &weights, &[(x, input)], y)
}

/// `g` compiled within `budget` on a runtime of that budget with staging forced.
fn budgeted(g: &Graph, budget: u64) -> (crate::Runtime, Model) {
    let rt = runtime(true, Some(budget));
    let desc = within(budget);
    let m = rt.compile_with(g, &desc).unwrap();
    (rt, m)
}

/// The model's offload report, after checking that it copies (staging forced) and that its
/// peak stayed within `budget`.
fn report_within(m: &Model, budget: u64) -> super::super::OffloadReport {
    let r = m.memory_report();
    let o = r.offload.clone().unwrap();
    assert!(!o.unified, "staging forced");
    assert!(
        r.peak_device_bytes <= budget,
        "{} > {budget}",
        r.peak_device_bytes
    );
    o
}

#[test]
fn a_recomputed_activation_gives_the_unbudgeted_bits_with_staging_forced() {
    let (g, x, w, y) = graph();
    let plain = runtime(true, None);
    let mut m = plain.compile(&g).unwrap();
    let expected = run(&mut m, x, &w, y);
    drop(m);
    // At each sum `x`, `a`, both addends and `h` are live: 5 activations and the weights; half
    // an activation less, and `a` must leave, re-run from `x` before the residual instead of
    // copied out and back (nothing else can: the addends' inputs are gone by then).
    let bytes = LEN as u64 * 4;
    let budget = 4 * bytes + bytes / 2 + 8 * W as u64 * 4;
    let (rt, mut m) = budgeted(&g, budget);
    assert_eq!(run(&mut m, x, &w, y), expected);
    let o = report_within(&m, budget);
    // Two runs, one re-run of `branch` each: reads `x`, writes `a`.
    assert_eq!(o.bytes_recomputed, 2 * bytes, "{o:?}");
    assert_eq!(o.recompute_work, 2 * 2 * bytes, "{o:?}");
    assert_eq!(o.bytes_to_host, 0, "nothing swapped: {o:?}");
    let won = o
        .outcomes
        .iter()
        .find(|s| s.score.name() == o.score)
        .unwrap();
    assert_eq!(won.bytes_recomputed, bytes);
    drop(m);
    rt.check_leaks().unwrap();
}

#[test]
fn a_chain_is_re_run_before_the_activation_whose_input_is_gone() {
    let (g, [x, e], w, y) = chained_graph();
    let small: Vec<f32> = (0..W).map(|i| (i % 7) as f32 - 3.0).collect();
    let run_all = |m: &mut Model| {
        m.set_input(e, bytemuck::cast_slice(&small)).unwrap();
        run(m, x, &w, y)
    };
    let plain = runtime(true, None);
    let expected = run_all(&mut plain.compile(&g).unwrap());
    // As above, plus `e` and, at the residual, `relu(e)` re-run into a transient residency.
    let bytes = LEN as u64 * 4;
    let budget = 4 * bytes + bytes / 2 + 10 * W as u64 * 4;
    let (rt, mut m) = budgeted(&g, budget);
    assert_eq!(run_all(&mut m), expected);
    let o = report_within(&m, budget);
    // Two runs, each re-running `small` (reads `e`, writes its W floats), then `branch` (reads
    // `x` and `relu(e)`, writes `a`).
    let small_bytes = W as u64 * 4;
    assert_eq!(o.bytes_recomputed, 2 * (bytes + small_bytes), "{o:?}");
    assert_eq!(
        o.recompute_work,
        2 * (2 * small_bytes + 2 * bytes + small_bytes),
        "{o:?}"
    );
    assert_eq!(o.bytes_to_host, 0, "nothing swapped: {o:?}");
    drop(m);
    rt.check_leaks().unwrap();
}

/// `CompileDesc::recompute` off (the switch that compares the two on one model): the budget
/// only a re-run of `branch` meets is refused, naming the op that cannot fit, and a budget with
/// room for every activation is met without re-runs, with the same bits.
#[test]
fn recompute_switched_off_only_keeps_or_swaps() {
    let (g, x, w, y) = graph();
    let plain = runtime(true, None);
    let expected = run(&mut plain.compile(&g).unwrap(), x, &w, y);
    let bytes = LEN as u64 * 4;
    let tight = 4 * bytes + bytes / 2 + 8 * W as u64 * 4;
    let desc = |budget: u64, recompute: bool| CompileDesc {
        device_budget: Some(budget),
        recompute,
        ..CompileDesc::default()
    };
    let rt = runtime(true, None);
    assert!(rt.compile_with(&g, &desc(tight, true)).is_ok());
    match rt.compile_with(&g, &desc(tight, false)) {
        Err(crate::Error::BudgetBelowWorkingSet { op, .. }) => {
            assert!(op.starts_with("sum"), "{op}")
        }
        Ok(_) => panic!("swap-only met the budget: the switch did nothing"),
        Err(e) => panic!("{e}"),
    }
    let roomy = tight + bytes;
    let mut m = rt.compile_with(&g, &desc(roomy, false)).unwrap();
    assert_eq!(run(&mut m, x, &w, y), expected);
    let o = m.memory_report().offload.unwrap();
    assert_eq!((o.bytes_recomputed, o.recompute_work), (0, 0), "{o:?}");
}

/// `CompileDesc::rates`: the planner's defaults, given rates (which the report echoes; bad ones
/// refused), or rates measured once per runtime on its backend and kept for every later compile.
#[test]
fn the_planner_plans_with_default_given_or_measured_rates() {
    use crate::Rates;
    let (g, ..) = graph();
    let bytes = LEN as u64 * 4;
    let budget = 4 * bytes + bytes / 2 + 8 * W as u64 * 4;
    let rt = runtime(true, None);
    // Roomier than the tightest plan: measured rates move with the machine's load, and the
    // schedule they choose must fit whatever they are.
    let budget = budget + 4 * bytes;
    let rates_of = |rates: Rates| {
        let desc = CompileDesc {
            device_budget: Some(budget),
            rates,
            ..CompileDesc::default()
        };
        let o = rt.compile_with(&g, &desc)?.memory_report().offload.unwrap();
        Ok::<_, crate::Error>((o.link_bandwidth, o.device_rate))
    };
    let d = crate::offload::OffloadDesc::new(0, 1);
    assert_eq!(
        rates_of(Rates::Default).unwrap(),
        (d.link_bandwidth, d.device_bandwidth)
    );
    let given = Rates::Given {
        link: 3e9,
        device: 7e10,
    };
    assert_eq!(rates_of(given).unwrap(), (3e9, 7e10));
    let bad = Rates::Given {
        link: 0.0,
        device: 1e9,
    };
    assert!(matches!(
        rates_of(bad),
        Err(crate::Error::Argument(crate::ArgumentError::Invalid { .. }))
    ));
    let measured = rates_of(Rates::Measured).unwrap();
    assert!(
        measured.0.is_finite() && measured.0 > 0.0 && measured.1.is_finite() && measured.1 > 0.0,
        "{measured:?}"
    );
    assert_eq!(
        rates_of(Rates::Measured).unwrap(),
        measured,
        "kept per runtime"
    );
    rt.check_leaks().unwrap();
}
