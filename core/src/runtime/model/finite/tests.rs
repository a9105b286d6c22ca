//! The finiteness check of weights: the scan across chunk boundaries, and every binding path of
//! a model (whole, streamed, budgeted) refusing NaN and infinity (issue 46, finding 6: the
//! library's weight setter accepted NaN; only the command-line tools checked their files).

use std::sync::Arc;

use super::*;
use crate::graph::{Graph, TensorId};
use crate::host::{HostBackend, HostConfig};
use crate::ops::Op;
use crate::runtime::{CompileDesc, Model, Runtime, RuntimeConfig};

fn expect_non_finite(r: Result<()>, at: u64, nan: bool) {
    match r {
        Err(Error::NonFiniteWeight {
            tensor,
            element,
            value,
        }) => {
            assert_eq!((tensor.as_str(), element), ("w", at));
            assert_eq!(value.is_nan(), nan, "{value}");
        }
        other => panic!("expected NonFiniteWeight at {at}, got {other:?}"),
    }
}

#[test]
fn scan_finds_elements_cut_by_chunk_boundaries() {
    // An f64 infinity at element 2, fed in 4-byte chunks: its halves arrive in two chunks.
    let values = [1.0f64, -2.5, f64::INFINITY, 3.0];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut scan = FiniteScan::new("w", DType::F64);
    let r = bytes.chunks(4).try_for_each(|c| scan.feed(c));
    expect_non_finite(r, 2, false);
    // f16: a NaN (0x7e00) at element 3 of odd-sized chunks.
    let halves = [0x3c00u16, 0x4000, 0xc000, 0x7e00];
    let bytes: Vec<u8> = halves.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut scan = FiniteScan::new("w", DType::F16);
    let r = bytes.chunks(3).try_for_each(|c| scan.feed(c));
    expect_non_finite(r, 3, true);
    // Finite floats and every integer pass.
    let mut scan = FiniteScan::new("w", DType::F32);
    scan.feed(bytemuck::cast_slice(&[f32::MAX, f32::MIN, 0.0]))
        .unwrap();
    let mut scan = FiniteScan::new("w", DType::I32);
    scan.feed(&f32::NAN.to_le_bytes()).unwrap();
}

const K: usize = 64;
const N: usize = 1024;

/// `y = x · wᵀ` with w `[N, K]` (256 KiB: above the budgeted model's offload threshold).
fn graph() -> (Graph, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1, K]);
    let w = g.weight("w", DType::F32, &[N, K]);
    let op = Op::matmul((1, 1, N as u32, K as u32), false, true, true, false, 1.0);
    let y = g.op(op, &[x, w], &[1, N], "dense").unwrap();
    g.output(y);
    (g, w)
}

fn model(budget: Option<u64>) -> (Model, TensorId) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let mut config = RuntimeConfig::default();
    config.device.budget = budget;
    let rt = Runtime::new(backend, config).unwrap();
    let (g, w) = graph();
    let desc = CompileDesc {
        device_budget: budget,
        ..CompileDesc::default()
    };
    (rt.compile_with(&g, &desc).unwrap(), w)
}

/// Regression for issue 46 (finding 6): `Model::set_weight` bound NaN weights without a word.
#[test]
fn every_binding_path_refuses_non_finite_weights() {
    let at = N * K - 5;
    for budget in [None, Some(1 << 20)] {
        for bad in [f32::NAN, f32::NEG_INFINITY] {
            let mut w = vec![0.5f32; N * K];
            w[at] = bad;
            let bytes: &[u8] = bytemuck::cast_slice(&w);
            let (mut m, id) = model(budget);
            let r = m.set_weight(id, bytes).map(|_| ());
            expect_non_finite(r, at as u64, bad.is_nan());
            // Streamed in chunks: the bad element arrives in the last one.
            let r = m
                .set_weight_chunks(id, 7, bytes.len() as u64, bytes.chunks(1 << 12))
                .map(|_| ());
            expect_non_finite(r, at as u64, bad.is_nan());
            assert_eq!(
                m.memory_report().weight_store.tensors,
                0,
                "budget {budget:?}: a refused weight is not stored"
            );
            // The same tensor with finite values binds.
            w[at] = 1.0;
            m.set_weight(id, bytemuck::cast_slice(&w)).unwrap();
        }
    }
}
