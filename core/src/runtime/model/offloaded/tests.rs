use std::sync::Arc;

use super::*;
use crate::{DType, Graph, HostBackend, HostConfig, Op, RuntimeConfig, TensorId};

const LEN: usize = 64 << 10; // 256 KiB of f32 per tensor

/// Six layers `h = relu(h + w_k)`, the first layer's output added back at the end (a long
/// absence), `y` the output.
fn graph() -> (Graph, TensorId, Vec<TensorId>, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[LEN]);
    let add = Op::Add {
        len: LEN as u32,
        b_len: LEN as u32,
    };
    let mut weights = Vec::new();
    let mut h = x;
    let mut skip = None;
    for k in 0..6 {
        let w = g.weight(&format!("w{k}"), DType::F32, &[LEN]);
        weights.push(w);
        let s = g
            .op(add.clone(), &[h, w], &[LEN], &format!("add{k}"))
            .unwrap();
        h = g
            .op(
                Op::Relu { len: LEN as u32 },
                &[s],
                &[LEN],
                &format!("relu{k}"),
            )
            .unwrap();
        skip.get_or_insert(h);
    }
    let y = g.op(add, &[h, skip.unwrap()], &[LEN], "residual").unwrap();
    g.output(y);
    (g, x, weights, y)
}

fn runtime(force_staging: bool, budget: Option<u64>) -> Runtime {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let mut config = RuntimeConfig {
        force_staging,
        ..RuntimeConfig::default()
    };
    config.device.budget = budget;
    Runtime::new(host, config).unwrap()
}

/// Sets the weights and the input, runs twice, returns the output's bits.
fn run(model: &mut Model, x: TensorId, weights: &[TensorId], y: TensorId) -> Vec<u32> {
    for (k, &w) in weights.iter().enumerate() {
        let data: Vec<f32> = (0..LEN)
            .map(|i| ((i * 7 + k * 13) % 17) as f32 - 8.0)
            .collect();
        model.set_weight(w, bytemuck::cast_slice(&data)).unwrap();
    }
    let input: Vec<f32> = (0..LEN).map(|i| (i % 11) as f32 * 0.25 - 1.0).collect();
    model.set_input(x, bytemuck::cast_slice(&input)).unwrap();
    model.run().unwrap();
    let first: Vec<f32> = model.read_output(y).unwrap();
    model.run().unwrap();
    let second: Vec<f32> = model.read_output(y).unwrap();
    assert_eq!(first, second, "a second run changes nothing");
    first.iter().map(|v| v.to_bits()).collect()
}

fn unbudgeted() -> (Vec<u32>, u64) {
    let (g, x, w, y) = graph();
    let rt = runtime(false, None);
    let mut m = rt.compile(&g).unwrap();
    let out = run(&mut m, x, &w, y);
    let r = m.memory_report();
    (
        out,
        r.weight_bytes + r.io_bytes + r.activation_planned_bytes,
    )
}

#[test]
fn half_and_forty_percent_budget_runs_equal_the_unbudgeted_run_and_stays_within_it() {
    let (expected, need) = unbudgeted();
    for (force_staging, budget) in [
        (true, need / 2),
        (true, need * 2 / 5),
        (false, need / 2),
        (false, need * 2 / 5),
    ] {
        let (g, x, w, y) = graph();
        let rt = runtime(force_staging, Some(budget));
        let mut m = rt
            .compile_with(
                &g,
                &CompileDesc {
                    device_budget: Some(budget),
                    ..CompileDesc::default()
                },
            )
            .unwrap();
        assert_eq!(
            run(&mut m, x, &w, y),
            expected,
            "force_staging {force_staging}"
        );
        let r = m.memory_report();
        let o = r.offload.clone().unwrap();
        assert!(
            r.peak_device_bytes <= budget,
            "{} > {budget}",
            r.peak_device_bytes
        );
        assert!(o.planned_peak <= budget);
        assert_eq!(o.unified, !force_staging);
        if force_staging {
            assert!(o.bytes_to_device > 0, "{o:?}");
            // At 40% the skip connection must leave too: an activation goes out and back.
            assert_eq!(o.bytes_to_host > 0, budget < need / 2, "{o:?}");
        } else {
            assert_eq!(
                (o.bytes_to_device, o.bytes_to_host),
                (0, 0),
                "unified: nothing moves"
            );
        }
        drop(m);
        rt.check_leaks().unwrap();
    }
}

#[test]
fn a_budget_below_an_ops_operands_is_a_typed_error_naming_it() {
    let (g, ..) = graph();
    let rt = runtime(true, None);
    let err = rt
        .compile_with(
            &g,
            &CompileDesc {
                device_budget: Some(600 << 10),
                ..CompileDesc::default()
            },
        )
        .err()
        .unwrap();
    match err {
        Error::BudgetBelowWorkingSet { op, needed, .. } => {
            assert_eq!(op, "add0");
            assert_eq!(needed, 3 * (256 << 10), "x, w0 and the sum");
        }
        e => panic!("{e}"),
    }
    assert_eq!(rt.device_pool().stats().allocations, 0, "nothing held");
}
