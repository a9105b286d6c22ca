//! Instances for the validating front's splits: ops whose operands exceed a binding limit, and
//! ops run over segmented tensors.

use crate::ops::{Op, WeightFormat};

/// Ops of every kind the validating front splits across bindings, each with a binding limit that
/// some of its operands exceed while a split keeps it at offsets on 256 bytes (4 KiB; 64 KiB for
/// the mean pool, whose mask rows need 64 units per part).
pub fn split_instances() -> Vec<(Op, u64)> {
    let mean_pool = Op::MeanPool {
        batch: 12,
        seq: 64,
        dim: 64,
    };
    let small = [
        Op::Add {
            len: 3001,
            b_len: 3001,
        },
        Op::Mul {
            len: 96 * 40,
            b_len: 96,
        },
        Op::Gelu { len: 2049 },
        Op::Scale {
            len: 5000,
            alpha: -0.5,
        },
        Op::Relu { len: 1500 },
        Op::Copy { len: 1111 },
        Op::LayerNorm {
            rows: 50,
            cols: 96,
            eps: 1e-5,
        },
        Op::Softmax {
            rows: 48,
            cols: 64,
            masked: true,
            rows_per_mask: 4,
        },
        Op::Softmax {
            rows: 33,
            cols: 64,
            masked: false,
            rows_per_mask: 1,
        },
        Op::L2Normalize {
            rows: 40,
            cols: 64,
            eps: 1e-12,
        },
        Op::Embedding {
            vocab: 50,
            dim: 16,
            rows: 300,
            weight_format: WeightFormat::F32,
        },
        Op::Embedding {
            vocab: 50,
            dim: 16,
            rows: 300,
            weight_format: WeightFormat::Int8 { group: 0 },
        },
        Op::linear(70, 24, 16),
        Op::MatMul {
            batch: 3,
            m: 20,
            n: 24,
            k: 16,
            trans_a: false,
            trans_b: false,
            broadcast_b: true,
            bias: false,
            alpha: 0.5,
            weight_format: WeightFormat::F16,
        },
        Op::matmul((12, 8, 16, 8), true, false, false, false, 1.0),
        Op::conv2d((6, 2, 8, 8), 4, (3, 3), 1, 1, true),
        Op::max_pool2d((3, 8, 16, 16), 2, 2),
        Op::Permute {
            dims: [6, 8, 4, 8],
            perm: [0, 2, 1, 3],
        },
    ];
    let mut ops: Vec<(Op, u64)> = small.into_iter().map(|op| (op, 1 << 12)).collect();
    ops.push((mean_pool, 1 << 16));
    ops
}

/// One instance of every op the validating front can cut into parts, each with at least 256
/// units along its split axis: enough that a tensor of it splits into several segments cut at
/// the coarsest step any backend's binding alignment asks (64 units of 4 bytes at CUDA's 256-byte
/// alignment), with the operands every part reads whole (weights, biases, tables) small. The
/// conformance suite runs them over segmented tensors ([`Op::split_shapes`]).
pub fn segment_instances() -> Vec<Op> {
    let matmul = |batch, m, n, k, broadcast_b, weight_format| Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a: false,
        trans_b: broadcast_b,
        broadcast_b,
        bias: broadcast_b,
        alpha: 0.75,
        weight_format,
    };
    vec![
        Op::Add {
            len: 6000,
            b_len: 6000,
        },
        Op::Mul {
            len: 256 * 40,
            b_len: 40,
        },
        Op::Gelu { len: 5001 },
        Op::Scale {
            len: 5000,
            alpha: 1.5,
        },
        Op::Relu { len: 4099 },
        Op::Copy { len: 3333 },
        Op::LayerNorm {
            rows: 256,
            cols: 40,
            eps: 1e-5,
        },
        Op::Softmax {
            rows: 512,
            cols: 16,
            masked: true,
            rows_per_mask: 2,
        },
        Op::Softmax {
            rows: 256,
            cols: 24,
            masked: false,
            rows_per_mask: 1,
        },
        Op::L2Normalize {
            rows: 256,
            cols: 20,
            eps: 1e-12,
        },
        Op::Embedding {
            vocab: 50,
            dim: 16,
            rows: 512,
            weight_format: WeightFormat::F32,
        },
        Op::Embedding {
            vocab: 50,
            dim: 16,
            rows: 512,
            weight_format: WeightFormat::Int8 { group: 0 },
        },
        matmul(1, 256, 24, 16, true, WeightFormat::F32),
        matmul(1, 256, 24, 16, true, WeightFormat::F16),
        matmul(256, 2, 8, 4, false, WeightFormat::F32),
        Op::MeanPool {
            batch: 256,
            seq: 8,
            dim: 8,
        },
        Op::conv2d((256, 2, 4, 4), 4, (3, 3), 1, 1, true),
        Op::max_pool2d((16, 16, 4, 4), 2, 2),
        Op::Permute {
            dims: [256, 2, 3, 4],
            perm: [0, 2, 1, 3],
        },
    ]
}
