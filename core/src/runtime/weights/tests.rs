//! The weight store on the host backend: shared bytes across shapes, reference counts, transactional
//! binding. The conformance suite repeats the sharing check on every target.

use std::sync::Arc;

use crate::graph::{Graph, TensorId};
use crate::host::{HostBackend, HostConfig};
use crate::ops::{DType, Op};
use crate::runtime::{Model, Runtime, RuntimeConfig};
use crate::{Error, Result};

fn runtime() -> Runtime {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    Runtime::new(backend, RuntimeConfig::default()).unwrap()
}

const K: usize = 96;
const N: usize = 80;

/// A `Linear` over `rows` rows: input x [rows, K], weights w [N, K] and b [N], output [rows, N].
fn linear(rows: usize) -> (Graph, [TensorId; 4]) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[rows, K]);
    let w = g.weight("dense.weight", DType::F32, &[N, K]);
    let b = g.weight("dense.bias", DType::F32, &[N]);
    let op = Op::linear(rows as u32, N as u32, K as u32);
    let y = g.op(op, &[x, w, b], &[rows, N], "dense").unwrap();
    g.output(y);
    (g, [x, w, b, y])
}

fn weights() -> (Vec<f32>, Vec<f32>) {
    let w = (0..N * K).map(|i| (i % 13) as f32 * 0.25 - 1.0).collect();
    let b = (0..N).map(|i| i as f32 * 0.5).collect();
    (w, b)
}

fn bound(rt: &Runtime, rows: usize) -> Result<(Model, [TensorId; 4])> {
    let (g, ids) = linear(rows);
    let mut m = rt.compile(&g)?;
    let (w, b) = weights();
    m.set_weight(ids[1], bytemuck::cast_slice(&w))?;
    m.set_weight(ids[2], bytemuck::cast_slice(&b))?;
    Ok((m, ids))
}

fn in_use(rt: &Runtime) -> u64 {
    rt.device_pool().stats().in_use
}

/// Three shapes hold their weights once: the device bytes of three models together are the sum
/// of each model alone minus two copies of the weights (measured in the pool, not counted).
#[test]
fn three_shapes_hold_their_weights_once() {
    let rt = runtime();
    let mut alone = Vec::new();
    let mut weight_bytes = 0;
    for rows in [1, 7, 33] {
        let (g, ids) = linear(rows);
        let mut m = rt.compile(&g).unwrap();
        let before = in_use(&rt);
        let (w, b) = weights();
        m.set_weight(ids[1], bytemuck::cast_slice(&w)).unwrap();
        m.set_weight(ids[2], bytemuck::cast_slice(&b)).unwrap();
        weight_bytes = in_use(&rt) - before;
        alone.push(in_use(&rt));
        drop(m);
        rt.synchronize().unwrap();
        assert_eq!(in_use(&rt), 0, "dropping the only model frees its weights");
    }
    assert!(weight_bytes >= ((N * K + N) * 4) as u64);
    let models: Vec<_> = [1, 7, 33].map(|rows| bound(&rt, rows).unwrap()).into();
    assert_eq!(in_use(&rt), alone.iter().sum::<u64>() - 2 * weight_bytes);
    let report = models[0].0.memory_report();
    assert_eq!(report.weight_bytes, ((N * K + N) * 4) as u64);
    assert_eq!(
        report.weight_bytes_by_dtype,
        vec![(DType::F32, report.weight_bytes)]
    );
    assert_eq!(report.weight_store.tensors, 2);
    assert_eq!(report.weight_store.bytes, report.weight_bytes);
    assert_eq!(report.weight_store.references, 6);
    assert_eq!(
        report.weight_store.referenced_bytes,
        3 * report.weight_bytes
    );
    // Every model computes with the shared bytes.
    for (mut m, ids) in models {
        let rows = m.graph().decl(ids[0]).unwrap().shape[0];
        let x: Vec<f32> = (0..rows * K).map(|i| (i % 7) as f32 - 3.0).collect();
        m.set_input(ids[0], bytemuck::cast_slice(&x)).unwrap();
        m.run().unwrap();
        let y = m.read_output::<f32>(ids[3]).unwrap();
        let (w, b) = weights();
        for r in 0..rows {
            for j in 0..N {
                let dot: f32 = (0..K).map(|p| x[r * K + p] * w[j * K + p]).sum();
                assert!((y[r * N + j] - dot - b[j]).abs() <= 1e-3 * (1.0 + dot.abs()));
            }
        }
    }
    rt.synchronize().unwrap();
    assert_eq!(
        rt.weights().report().tensors,
        0,
        "freed with the last model"
    );
    assert_eq!(in_use(&rt), 0);
    rt.check_leaks().unwrap();
}

/// The store outlives any one model: dropping the first binder keeps the bytes for the others.
#[test]
fn weights_are_freed_with_the_last_model_only() {
    let rt = runtime();
    let (a, _) = bound(&rt, 2).unwrap();
    let (b, _) = bound(&rt, 3).unwrap();
    let held = rt.weights().report().bytes;
    drop(a);
    assert_eq!(rt.weights().report().bytes, held);
    assert_eq!(rt.weights().report().references, 2);
    drop(b);
    assert_eq!(rt.weights().report(), Default::default());
}

/// Equal names with different bytes are different weights, and rebinding a shared weight gives
/// the model new bytes without touching the other model's.
#[test]
fn new_bytes_under_a_shared_name_never_overwrite_another_model() {
    let rt = runtime();
    let (a, ids_a) = bound(&rt, 2).unwrap();
    let (mut b, ids_b) = bound(&rt, 2).unwrap();
    assert_eq!(rt.weights().report().tensors, 2);
    let zeros = vec![0f32; N];
    b.set_weight(ids_b[2], bytemuck::cast_slice(&zeros))
        .unwrap();
    assert_eq!(rt.weights().report().tensors, 3);
    assert_eq!(rt.weights().report().references, 4);
    let bias_a = a.read_output::<f32>(ids_a[2]).unwrap();
    assert_eq!(bias_a, weights().1, "model a keeps its bias");
    assert_eq!(b.read_output::<f32>(ids_b[2]).unwrap(), zeros);
    // Setting the same bytes again is a no-op, not a second reference.
    b.set_weight(ids_b[2], bytemuck::cast_slice(&zeros))
        .unwrap();
    assert_eq!(rt.weights().report().references, 4);
}

/// A model whose weight was never set refuses to run and names the weight.
#[test]
fn an_unset_weight_is_a_clear_error() {
    let rt = runtime();
    let (g, ids) = linear(2);
    let mut m = rt.compile(&g).unwrap();
    m.set_weight(ids[2], &[0u8; N * 4]).unwrap();
    m.set_input(ids[0], &[0u8; 2 * K * 4]).unwrap();
    match m.run() {
        Err(Error::Graph(crate::GraphError::WeightNotSet { tensor })) => {
            assert_eq!(tensor, "dense.weight")
        }
        other => panic!("expected an unset-weight error, got {other:?}"),
    }
}

/// Failed bindings (wrong size, chunks that do not add up, a misaligned chunk boundary, a tensor
/// that is not a weight) leave the store and the pool as they were.
#[test]
fn failed_bindings_are_transactional() {
    let rt = runtime();
    let (g, ids) = linear(2);
    let mut m = rt.compile(&g).unwrap();
    let before = in_use(&rt);
    let w = vec![1u8; N * K * 4];
    let size = w.len() as u64;
    assert!(matches!(
        m.set_weight(ids[1], &w[4..]),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        m.set_weight_chunks(ids[1], 7, size, [&w[..400], &w[400..800]]),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        m.set_weight_chunks(ids[1], 7, size, [&w[..401], &w[401..]]),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        m.set_weight_chunks(ids[1], 7, size, [&w[..], &w[..4]]),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        m.set_weight(ids[0], &w[..2 * K * 4]),
        Err(Error::Graph(crate::GraphError::WrongKind { .. }))
    ));
    rt.synchronize().unwrap();
    assert_eq!(in_use(&rt), before);
    assert_eq!(rt.weights().report(), Default::default());
    // Streamed in chunks, the weight holds the same bytes as uploaded whole.
    let chunks = w.chunks(1024);
    m.set_weight_chunks(ids[1], super::content_hash(&w), size, chunks)
        .unwrap();
    assert_eq!(m.read_output::<u8>(ids[1]).unwrap(), w);
}

/// The streaming hash equals the one-shot hash for any chunking.
#[test]
fn hash_does_not_depend_on_chunking() {
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let whole = super::content_hash(&bytes);
    for chunk in [1, 3, 8, 64, 4096] {
        let mut h = super::WeightHasher::new();
        bytes.chunks(chunk).for_each(|c| h.update(c));
        assert_eq!(h.finish(), whole, "chunk {chunk}");
    }
    assert_ne!(super::content_hash(&bytes[1..]), whole);
}
