//! Host reference speed on MiniLM-sized work: the threaded sgemm matmul against the naive triple
//! loop (the baseline), both in the same run, the row kernels a transformer layer calls, and the
//! product on f16 and int8 weights against the f32 product (the baseline) and against
//! dequantising the whole weight first (the host's first quantized path, the peer).
//!
//! Run: `cargo bench -p tensormem-host --bench host_ops`.

#![allow(clippy::unwrap_used, reason = "benchmark setup fails loudly")]
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tensormem_contract::ops::{Op, WeightFormat, quant};
use tensormem_host::kernels as host;

fn data(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// MiniLM's linear layer as one op: `x [m, k] · w [n, k]ᵀ + bias`, f32 weights.
fn linear_op(m: usize, n: usize, k: usize) -> Op {
    Op::linear(m as u32, n as u32, k as u32)
}

/// Runs `op` on f32 inputs into `out` on the host backend (no allocation inside the timed loop).
fn run_f32<const N: usize>(op: &Op, inputs: [&[f32]; N], out: &mut [f32]) {
    let inputs: [&[u8]; N] = inputs.map(bytemuck::cast_slice);
    host::run(op, &inputs, &mut [bytemuck::cast_slice_mut(out)]).unwrap();
    black_box(out);
}

/// `c = x · wᵀ + bias` for `x [m, k]`, `w [n, k]`: the plain loop a first version would write.
fn naive_linear(m: usize, n: usize, k: usize, x: &[f32], w: &[f32], bias: &[f32], c: &mut [f32]) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for p in 0..k {
                acc += x[i * k + p] * w[j * k + p];
            }
            c[i * n + j] = acc + bias[j];
        }
    }
}

fn matmul(c: &mut Criterion) {
    // MiniLM's FFN up-projection for 128 tokens: [128, 384] · [1536, 384]ᵀ + bias.
    let (m, n, k) = (128usize, 1536usize, 384usize);
    let op = linear_op(m, n, k);
    let (x, w, bias) = (data(m * k), data(n * k), data(n));
    let mut out = vec![0f32; m * n];
    let mut g = c.benchmark_group("linear_128x384x1536");
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    g.bench_function("host_sgemm_threaded", |b| {
        b.iter(|| run_f32(&op, [&x, &w, &bias], &mut out))
    });
    g.bench_function("naive_baseline", |b| {
        b.iter(|| {
            naive_linear(m, n, k, &x, &w, &bias, &mut out);
            black_box(&out);
        })
    });
    g.finish();

    // Attention scores for 12 heads: [12, 128, 32] · [12, 128, 32]ᵀ.
    let op = Op::MatMul {
        batch: 12,
        m: 128,
        n: 128,
        k: 32,
        trans_a: false,
        trans_b: true,
        broadcast_b: false,
        bias: false,
        alpha: 0.176_776_7,
        weight_format: WeightFormat::F32,
    };
    let (q, kk) = (data(12 * 128 * 32), data(12 * 128 * 32));
    let mut s = vec![0f32; 12 * 128 * 128];
    let mut g = c.benchmark_group("attention_scores_12x128x128x32");
    g.throughput(Throughput::Elements(2 * 12 * 128 * 128 * 32));
    g.bench_function("host_sgemm_threaded", |b| {
        b.iter(|| run_f32(&op, [&q, &kk], &mut s))
    });
    g.finish();
}

fn rows(c: &mut Criterion) {
    let mut g = c.benchmark_group("row_ops_128x1536");
    let x = data(128 * 1536);
    let mut y = vec![0f32; x.len()];
    g.throughput(Throughput::Elements(x.len() as u64));
    let gelu = Op::Gelu {
        len: x.len() as u32,
    };
    g.bench_function("gelu", |b| b.iter(|| run_f32(&gelu, [&x], &mut y)));
    // Baseline: a copy of the same bytes, the floor for any elementwise op.
    let copy = Op::Copy {
        len: x.len() as u32,
    };
    g.bench_function("copy_baseline", |b| b.iter(|| run_f32(&copy, [&x], &mut y)));
    let softmax = Op::Softmax {
        rows: 128,
        cols: 1536,
        masked: false,
        rows_per_mask: 1,
    };
    g.bench_function("softmax", |b| b.iter(|| run_f32(&softmax, [&x], &mut y)));
    g.finish();
}

/// `linear_33x384x1536`: MiniLM's FFN up-projection for 3 sentences of 11 tokens (the sample's
/// reference batch), where each weight is reused only 33 times, so decoding it is a visible share.
fn quantized(c: &mut Criterion) {
    let (m, n, k) = (33usize, 1536usize, 384usize);
    let f32_op = linear_op(m, n, k);
    let (x, w, bias) = (data(m * k), data(n * k), data(n));
    let mut out = vec![0f32; m * n];
    let mut g = c.benchmark_group("linear_33x384x1536");
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    g.bench_function("f32_baseline", |b| {
        b.iter(|| run_f32(&f32_op, [&x, &w, &bias], &mut out))
    });
    for format in [WeightFormat::F16, WeightFormat::Int8 { group: 0 }] {
        let q = quant::quantize(&w, n as u64, k as u64, format).unwrap();
        let op = f32_op.with_weight_format(format);
        g.bench_function(format!("{}_panels", format.name()), |b| {
            b.iter(|| {
                let mut inputs: Vec<&[u8]> = vec![bytemuck::cast_slice(&x), &q.bytes];
                if format.has_scales() {
                    inputs.push(bytemuck::cast_slice(&q.scales));
                }
                inputs.push(bytemuck::cast_slice(&bias));
                host::run(&op, &inputs, &mut [bytemuck::cast_slice_mut(&mut out)]).unwrap();
                black_box(&out);
            })
        });
        g.bench_function(format!("{}_dequantize_whole_peer", format.name()), |b| {
            b.iter(|| {
                let deq = quant::dequantize(&q.bytes, &q.scales, n as u64, k as u64, format);
                run_f32(&f32_op, [&x, &deq.unwrap(), &bias], &mut out);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, matmul, rows, quantized);
criterion_main!(benches);
