use std::collections::BTreeMap;

use super::*;
use tensormem_contract::ops::permute_strides;

use tensormem_contract::ops::{KvDType, KvLayout};

use super::llm::PAGED_ATTENTION_BLOCK;
use crate::kernels::SOURCE;

/// Kind of one kernel parameter as declared in `kernels.cu`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Param {
    Ptr,
    U32,
    U64,
    F32,
}

/// Parses every `extern "C" __global__ void name(params)` of the CUDA source.
fn parse_kernels(src: &str) -> BTreeMap<String, Vec<Param>> {
    let mut out = BTreeMap::new();
    let marker = "extern \"C\" __global__ void ";
    let mut rest = src;
    while let Some(at) = rest.find(marker) {
        rest = &rest[at + marker.len()..];
        let open = rest.find('(').unwrap();
        let close = rest.find(')').unwrap();
        let name = rest[..open].trim().to_string();
        let params = rest[open + 1..close]
            .split(',')
            .map(|p| {
                let p = p.trim();
                if p.contains('*') {
                    Param::Ptr
                } else if p.starts_with("u32 ") {
                    Param::U32
                } else if p.starts_with("u64 ") {
                    Param::U64
                } else if p.starts_with("float ") {
                    Param::F32
                } else {
                    panic!("unknown parameter type in {name}: {p}")
                }
            })
            .collect();
        out.insert(name, params);
    }
    out
}

fn kinds(args: &[Arg]) -> Vec<Param> {
    args.iter()
        .map(|a| match a {
            Arg::Ptr(_) => Param::Ptr,
            Arg::U32(_) => Param::U32,
            Arg::U64(_) => Param::U64,
            Arg::F32(_) => Param::F32,
        })
        .collect()
}

/// One op of every variant, with each optional operand both on and off, and every weight-reading
/// op again with f16 and int8 weights.
fn sample_ops() -> Vec<Op> {
    let mut ops = f32_ops();
    let weighted: Vec<Op> = ops
        .iter()
        .filter(|op| op.weight_format() == WeightFormat::F32 && op.signature().is_ok())
        .flat_map(|op| op.quantised_variants(2))
        .collect();
    ops.extend(weighted);
    ops
}

fn f32_ops() -> Vec<Op> {
    let mm = |bias, trans_a, trans_b, broadcast_b| {
        Op::matmul((2, 5, 7, 3), trans_a, trans_b, broadcast_b, bias, 0.5)
    };
    vec![
        mm(false, false, false, false),
        mm(true, true, true, true),
        Op::Add { len: 12, b_len: 4 },
        Op::Mul { len: 12, b_len: 12 },
        Op::Scale { len: 9, alpha: 2.0 },
        Op::Gelu { len: 9 },
        Op::Relu { len: 9 },
        Op::LayerNorm {
            rows: 3,
            cols: 10,
            eps: 1e-5,
        },
        Op::Softmax {
            rows: 4,
            cols: 6,
            masked: false,
            rows_per_mask: 1,
        },
        Op::Softmax {
            rows: 4,
            cols: 6,
            masked: true,
            rows_per_mask: 2,
        },
        Op::Embedding {
            vocab: 10,
            dim: 4,
            rows: 3,
            weight_format: WeightFormat::F32,
        },
        Op::MeanPool {
            batch: 2,
            seq: 3,
            dim: 4,
        },
        Op::L2Normalize {
            rows: 2,
            cols: 5,
            eps: 1e-12,
        },
        Op::conv2d((1, 2, 5, 5), 3, (3, 3), 1, 1, true),
        Op::conv2d((2, 1, 6, 4), 1, (2, 2), 2, 0, false),
        Op::max_pool2d((1, 2, 4, 4), 2, 2),
        Op::Permute {
            dims: [2, 3, 4, 5],
            perm: [0, 2, 1, 3],
        },
        Op::Copy { len: 7 },
        Op::RmsNorm {
            rows: 3,
            cols: 10,
            eps: 1e-6,
        },
        Op::Rope {
            tokens: 2,
            heads: 3,
            head_dim: 4,
            theta: 10_000.0,
        },
        Op::SiluMul { len: 9 },
        Op::KvWrite {
            kv: small_kv(),
            blocks: 3,
            stride: small_kv().block_bytes().next_multiple_of(4) as u32,
            layer: 1,
            tokens: 5,
        },
        paged_attention(false, false),
        paged_attention(true, true),
    ]
}

fn small_kv() -> KvLayout {
    KvLayout {
        layers: 2,
        kv_heads: 2,
        head_dim: 3,
        block_tokens: 4,
        dtype: KvDType::Int8,
    }
}

fn paged_attention(carry_in: bool, carry_out: bool) -> Op {
    Op::PagedAttention {
        kv: small_kv(),
        blocks: 3,
        stride: small_kv().block_bytes().next_multiple_of(4) as u32,
        first_block: 2,
        layer: 1,
        tokens: 5,
        q_heads: 4,
        rows: 2,
        width: 3,
        scale: 0.5,
        carry_in,
        carry_out,
    }
}

fn addrs_for(op: &Op) -> Vec<u64> {
    let sig = op.signature().unwrap();
    (0..sig.inputs.len() + sig.outputs.len())
        .map(|i| 0x1000 * (i as u64 + 1))
        .collect()
}

#[test]
fn kernel_names_match_the_source() {
    let parsed = parse_kernels(SOURCE);
    let mut names: Vec<&str> = KERNEL_NAMES.to_vec();
    names.sort_unstable();
    let from_src: Vec<&str> = parsed.keys().map(String::as_str).collect();
    assert_eq!(names, from_src);
}

#[test]
fn every_op_has_a_call_matching_the_kernel_signature() {
    let parsed = parse_kernels(SOURCE);
    let mut covered = std::collections::BTreeSet::new();
    for op in sample_ops() {
        let call = plan_call(&op, &addrs_for(&op)).unwrap();
        let params = parsed
            .get(call.kernel)
            .unwrap_or_else(|| panic!("{} not in kernels.cu", call.kernel));
        assert_eq!(&kinds(&call.args), params, "{op:?}");
        covered.insert(call.kernel);
    }
    let fill = plan_fill_zero(0x2000, 100);
    assert_eq!(&kinds(&fill.args), &parsed["tm_fill_zero_bytes"]);
    covered.insert(fill.kernel);
    assert_eq!(
        covered.len(),
        KERNEL_NAMES.len(),
        "every kernel is reachable"
    );
}

#[test]
fn optional_operands_are_null_when_absent_and_outputs_come_last() {
    let op = Op::batched_matmul(1, 2, 2, 2);
    let call = plan_call(&op, &[10, 20, 30]).unwrap();
    assert_eq!(
        call.args[..5],
        [
            Arg::Ptr(10),
            Arg::Ptr(20),
            Arg::Ptr(0),
            Arg::Ptr(0),
            Arg::Ptr(30)
        ]
    );
    let op = Op::Softmax {
        rows: 2,
        cols: 2,
        masked: true,
        rows_per_mask: 1,
    };
    let call = plan_call(&op, &[10, 20, 30]).unwrap();
    assert_eq!(call.args[..3], [Arg::Ptr(10), Arg::Ptr(20), Arg::Ptr(30)]);
    assert!(matches!(
        plan_call(&op, &[10, 20]),
        Err(Error::BindingCount {
            expected: 3,
            actual: 2,
            ..
        })
    ));
}

#[test]
fn elementwise_grid_covers_every_element_or_strides() {
    for n in [0u64, 1, 255, 256, 257, 1 << 20, u64::from(u32::MAX)] {
        let d = elementwise_dims(n);
        assert_eq!(d.block, (ELEMENTWISE_BLOCK, 1, 1));
        assert!(d.grid.0 >= 1 && d.grid.0 <= GRID_MAX);
        let threads = u64::from(d.grid.0) * u64::from(d.block.0);
        assert!(threads >= n || d.grid.0 == GRID_MAX, "n = {n}");
    }
}

#[test]
fn row_blocks_are_powers_of_two_within_limits() {
    for cols in [1u32, 31, 32, 33, 100, 256, 257, 4096, u32::MAX] {
        let d = row_dims(7, cols);
        assert!(d.block.0.is_power_of_two(), "cols {cols}");
        assert!((ROW_BLOCK_MIN..=ROW_BLOCK_MAX).contains(&d.block.0));
        assert_eq!(d.shared_bytes, d.block.0 * 4);
        assert_eq!(d.grid.0, 7);
    }
    assert_eq!(row_dims(10, 100).block.0, 128);
    assert_eq!(row_dims(u32::MAX, 8).grid.0, GRID_MAX);
}

#[test]
fn matmul_grid_tiles_the_output() {
    let d = matmul_dims(3, 33, 16);
    assert_eq!(d.grid, (1, 3, 3));
    assert_eq!(d.block, (MATMUL_TILE, MATMUL_TILE, 1));
    let d = matmul_dims(100_000, 1 << 24, 1);
    assert_eq!(d.grid, (1, GRID_MAX, GRID_MAX));
}

#[test]
fn permute_strides_for_transpose_and_head_split() {
    // [a, b, c, d] -> [a, c, b, d]: output axis 1 walks input axis 2 (stride d).
    assert_eq!(permute_strides([2, 3, 4, 5], [0, 2, 1, 3]), [60, 5, 20, 1]);
    assert_eq!(permute_strides([2, 3, 4, 5], [0, 1, 2, 3]), [60, 20, 5, 1]);
    // Reference check: the kernel's index formula reproduces a naive permute.
    let dims = [2u32, 3, 4, 5];
    let perm = [3u8, 1, 0, 2];
    let od = Op::permuted_dims(dims, perm);
    let s = permute_strides(dims, perm);
    let len = dims.iter().map(|d| *d as u64).product::<u64>();
    let input: Vec<u64> = (0..len).collect();
    let mut seen = vec![false; len as usize];
    for i in 0..len {
        let o3 = i % od[3] as u64;
        let o2 = (i / od[3] as u64) % od[2] as u64;
        let o1 = (i / (od[3] as u64 * od[2] as u64)) % od[1] as u64;
        let o0 = i / (od[3] as u64 * od[2] as u64 * od[1] as u64);
        let src = input[(o0 * s[0] + o1 * s[1] + o2 * s[2] + o3 * s[3]) as usize];
        // The input coordinate along axis perm[j] must be o_j.
        let coords = [o0, o1, o2, o3];
        let in_strides = [60u64, 20, 5, 1];
        let expect: u64 = (0..4)
            .map(|j| coords[j] * in_strides[perm[j] as usize])
            .sum();
        assert_eq!(src, expect);
        seen[src as usize] = true;
    }
    assert!(
        seen.into_iter().all(|s| s),
        "a permutation reads every input once"
    );
}

/// Int8 weights: the scales pointer follows the weight, the bias and output shift by one, and
/// the trailing `fmt, group, groups` say int8 with per-group scales of the row of `k`.
#[test]
fn int8_matmul_passes_scales_and_groups() {
    let op = Op::MatMul {
        batch: 1,
        m: 3,
        n: 5,
        k: 13,
        trans_a: false,
        trans_b: true,
        broadcast_b: true,
        bias: true,
        alpha: 1.0,
        weight_format: WeightFormat::Int8 { group: 4 },
    };
    let call = plan_call(&op, &[10, 20, 30, 40, 50]).unwrap();
    assert_eq!(
        call.args[..5],
        [
            Arg::Ptr(10),
            Arg::Ptr(20),
            Arg::Ptr(30),
            Arg::Ptr(40),
            Arg::Ptr(50)
        ]
    );
    let n = call.args.len();
    assert_eq!(call.args[n - 3..], [Arg::U32(2), Arg::U32(4), Arg::U32(4)]);
    let f16 = op.with_weight_format(WeightFormat::F16);
    let call = plan_call(&f16, &[10, 20, 40, 50]).unwrap();
    assert_eq!(call.args[2], Arg::Ptr(0), "no scales for f16");
    assert_eq!(call.args[3], Arg::Ptr(40));
    let n = call.args.len();
    assert_eq!(call.args[n - 3..], [Arg::U32(1), Arg::U32(13), Arg::U32(1)]);
}

#[test]
fn kv_ops_pass_their_layout_and_carry() {
    // 2 layers x 2 (K, V) x 2 heads x 4 tokens x 3 int8 elements, then the scales.
    let scales_at = Arg::U32(2 * 2 * 2 * 4 * 3);
    let op = paged_attention(false, false);
    let call = plan_call(&op, &[10, 20, 30, 40, 50]).unwrap();
    assert_eq!(call.kernel, "tm_paged_attention");
    assert_eq!(
        call.args[..6],
        [
            Arg::Ptr(10),
            Arg::Ptr(20),
            Arg::Ptr(30),
            Arg::Ptr(40),
            Arg::Ptr(0),
            Arg::Ptr(50)
        ]
    );
    assert_eq!(call.args[9], Arg::U32(2), "int8 is dtype 2");
    assert_eq!(call.args[21], scales_at);
    assert_eq!(
        call.dims,
        LaunchDims {
            grid: (5 * 4, 1, 1),
            block: (PAGED_ATTENTION_BLOCK, 1, 1),
            shared_bytes: 0
        }
    );
    let call = plan_call(&paged_attention(true, true), &[10, 20, 30, 40, 50, 60]).unwrap();
    assert_eq!(call.args[4..6], [Arg::Ptr(50), Arg::Ptr(60)]);
    assert_eq!(call.args[19..21], [Arg::U32(1), Arg::U32(1)]);

    let op = Op::KvWrite {
        kv: small_kv(),
        blocks: 3,
        stride: 400,
        layer: 1,
        tokens: 5,
    };
    let call = plan_call(&op, &[1, 2, 3, 4]).unwrap();
    assert_eq!(call.kernel, "tm_kv_write");
    // One thread per (token, K/V head pair).
    assert_eq!(call.args[12], Arg::U32(4));
    assert_eq!(call.args[13], scales_at);
    assert_eq!(call.dims, elementwise_dims(5 * 4));
}
