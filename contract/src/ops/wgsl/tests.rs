//! Tests of the WGSL kernels: every source validates with naga, the declared bindings follow the
//! ABI (checked by reflecting the parsed module against `Op::signature`), and `kernel()` gives
//! sensible parameters and workgroup counts, including dispatches that spill into y.

use std::collections::HashSet;

use super::*;
use crate::ops::{DType, KvDType, KvLayout};

fn parse(key: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{key}: {}", e.emit_to_string(src)));
    // The one capability beyond the default: `unpack2x16float` (core WGSL; the Vulkan backend
    // and wgpu on every native backend enable it).
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32,
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{key}: {}", e.emit_to_string(src)));
    (module, info)
}

/// One op of every kernel variant.
fn sample_ops() -> Vec<Op> {
    let mut ops = Vec::new();
    for bias in [false, true] {
        ops.push(Op::matmul((2, 33, 70, 5), false, true, true, bias, 0.5));
        ops.push(Op::conv2d((2, 3, 9, 8), 4, (3, 3), 2, 1, bias));
        ops.push(Op::Softmax {
            rows: 24,
            cols: 10,
            masked: bias,
            rows_per_mask: 12,
        });
    }
    ops.extend([
        Op::Add {
            len: 100,
            b_len: 10,
        },
        Op::Mul {
            len: 100,
            b_len: 100,
        },
        Op::Scale {
            len: 65,
            alpha: -2.0,
        },
        Op::Gelu { len: 64 },
        Op::Relu { len: 1 },
        Op::Copy { len: 7 },
        Op::LayerNorm {
            rows: 3,
            cols: 384,
            eps: 1e-12,
        },
        Op::Embedding {
            vocab: 30,
            dim: 8,
            rows: 5,
            weight_format: WeightFormat::F32,
        },
        Op::MeanPool {
            batch: 2,
            seq: 7,
            dim: 384,
        },
        Op::L2Normalize {
            rows: 2,
            cols: 384,
            eps: 1e-12,
        },
        Op::max_pool2d((1, 2, 6, 6), 2, 2),
        Op::Permute {
            dims: [2, 3, 4, 5],
            perm: [0, 2, 1, 3],
        },
    ]);
    ops.extend(llm_ops());
    // Every weight-reading op again with f16 and int8 weights (per-group scales).
    let weighted: Vec<Op> = ops.iter().flat_map(|op| op.quantised_variants(2)).collect();
    ops.extend(weighted);
    ops
}

/// The decoder ops, each KV op with every KV dtype and paged attention with every carry variant.
fn llm_ops() -> Vec<Op> {
    let mut ops = vec![
        Op::RmsNorm {
            rows: 3,
            cols: 100,
            eps: 1e-6,
        },
        Op::Rope {
            tokens: 3,
            heads: 2,
            head_dim: 8,
            theta: 10_000.0,
        },
        Op::SiluMul { len: 70 },
    ];
    for dtype in [KvDType::F32, KvDType::F16, KvDType::Int8] {
        let kv = KvLayout {
            layers: 2,
            kv_heads: 2,
            head_dim: 6,
            block_tokens: 4,
            dtype,
        };
        let stride = kv.block_bytes().next_multiple_of(4) as u32;
        ops.push(Op::KvWrite {
            kv,
            blocks: 3,
            stride,
            layer: 1,
            tokens: 5,
        });
        for (carry_in, carry_out) in [(false, false), (true, false), (false, true), (true, true)] {
            ops.push(Op::PagedAttention {
                kv,
                blocks: 3,
                stride,
                first_block: 2,
                layer: 1,
                tokens: 5,
                q_heads: 4,
                rows: 2,
                width: 3,
                scale: 0.5,
                carry_in,
                carry_out,
            });
        }
    }
    ops
}

#[test]
fn every_source_parses_and_validates() {
    for (key, src) in sources() {
        let (module, _) = parse(key, src);
        let entry = module
            .entry_points
            .iter()
            .find(|e| e.name == "main")
            .unwrap_or_else(|| panic!("{key}: no entry point `main`"));
        assert_eq!(entry.stage, naga::ShaderStage::Compute, "{key}");
        let [x, y, z] = entry.workgroup_size;
        assert_eq!(x * y * z, WORKGROUP_SIZE, "{key}: workgroup size");
    }
}

#[test]
fn keys_are_unique_and_every_source_is_used() {
    let keys: HashSet<&str> = sources().iter().map(|(k, _)| *k).collect();
    assert_eq!(keys.len(), sources().len(), "duplicate keys");
    let used: HashSet<&str> = sample_ops()
        .iter()
        .map(|op| kernel(op).unwrap().key)
        .collect();
    assert_eq!(used, keys, "sample_ops must reach every source");
}

/// The module's globals are exactly the ABI: operand `i` at `@binding(i)`, a read-write storage
/// array of the operand's element type, then the 64-byte uniform block at `@binding(n)`.
#[test]
fn declared_bindings_follow_the_abi() {
    for op in sample_ops() {
        let k = kernel(&op).unwrap();
        let sig = op.signature().unwrap();
        assert_eq!(k.bindings, sig.inputs.len() + sig.outputs.len(), "{op:?}");
        assert!(k.bindings <= 6, "{op:?}: at most 6 storage bindings");
        let (module, _) = parse(k.key, k.source);
        let mut seen = vec![false; k.bindings + 1];
        for (_, var) in module.global_variables.iter() {
            let Some(rb) = &var.binding else {
                assert_eq!(var.space, naga::AddressSpace::WorkGroup, "{}", k.key);
                continue;
            };
            assert_eq!(rb.group, 0, "{}", k.key);
            let b = rb.binding as usize;
            assert!(b <= k.bindings, "{}: binding {b} beyond the ABI", k.key);
            assert!(!seen[b], "{}: binding {b} twice", k.key);
            seen[b] = true;
            if b == k.bindings {
                assert_eq!(var.space, naga::AddressSpace::Uniform, "{}", k.key);
                let size = module.types[var.ty].inner.size(module.to_ctx());
                assert_eq!(size, 64, "{}: Params is 16 u32", k.key);
                continue;
            }
            assert_eq!(
                var.space,
                naga::AddressSpace::Storage {
                    access: naga::StorageAccess::LOAD | naga::StorageAccess::STORE
                },
                "{}: operand {b} must be read_write",
                k.key
            );
            let operand = sig.operands().nth(b).unwrap();
            let naga::TypeInner::Array { base, .. } = module.types[var.ty].inner else {
                panic!("{}: operand {b} is not an array", k.key)
            };
            let scalar = match module.types[base].inner {
                naga::TypeInner::Scalar(s) => s,
                ref other => panic!("{}: element type {other:?}", k.key),
            };
            let want = match operand.dtype {
                DType::F32 => naga::Scalar::F32,
                // Packed weights: two f16 or four int8 per word; KV segments' bytes as words.
                DType::U32 | DType::F16 | DType::I8 | DType::U8 => naga::Scalar::U32,
                other => panic!("unexpected dtype {other:?}"),
            };
            // Copy moves any 32-bit type as u32.
            let want = if k.key == "copy" {
                naga::Scalar::U32
            } else {
                want
            };
            assert_eq!(scalar, want, "{}: operand {b} element type", k.key);
        }
        assert!(
            seen.iter().all(|&s| s),
            "{}: missing bindings {seen:?}",
            k.key
        );
    }
}

#[test]
fn params_encode_the_op() {
    let k = kernel(&Op::matmul((3, 65, 33, 7), true, false, true, true, 0.125)).unwrap();
    assert_eq!(k.key, "matmul_bias");
    // The shared parameters (flags, alpha, fmt, group, groups), then the tile counts.
    assert_eq!(
        &k.params[..14],
        &[3, 65, 33, 7, 1, 0, 1, 1, 0.125f32.to_bits(), 0, 7, 1, 2, 3]
    );
    assert_eq!(k.workgroups, [2 * 3 * 3, 1, 1]);
    assert_eq!(k.bindings, 4);
    assert_eq!(k.params_bytes().len(), 64);
    assert_eq!(&k.params_bytes()[32..36], &0.125f32.to_le_bytes());

    let k = kernel(&Op::Scale {
        len: 129,
        alpha: -1.5,
    })
    .unwrap();
    assert_eq!(&k.params[..2], &[129, (-1.5f32).to_bits()]);
    assert_eq!(k.workgroups, [3, 1, 1]);

    let k = kernel(&Op::Permute {
        dims: [2, 3, 4, 5],
        perm: [3, 1, 0, 2],
    })
    .unwrap();
    // Element count, output dims 1–3 of [5, 3, 2, 4]; input strides [60, 20, 5, 1] taken in
    // perm order.
    assert_eq!(&k.params[..8], &[120, 3, 2, 4, 1, 20, 60, 5]);

    let k = kernel(&Op::conv2d((2, 3, 9, 8), 4, (3, 3), 2, 1, false)).unwrap();
    assert_eq!(k.key, "conv2d");
    assert_eq!(
        &k.params[..16],
        &[2, 3, 9, 8, 4, 3, 3, 2, 1, 0, 5, 4, 0, 27, 1, 2 * 4 * 5 * 4]
    );
    assert_eq!(k.workgroups, [3, 1, 1]);

    let k = kernel(&Op::max_pool2d((2, 3, 7, 7), 3, 2)).unwrap();
    assert_eq!(&k.params[..9], &[2, 3, 7, 7, 3, 2, 3, 3, 54]);

    let k = kernel(&Op::Softmax {
        rows: 48,
        cols: 128,
        masked: true,
        rows_per_mask: 12,
    })
    .unwrap();
    assert_eq!(
        (k.key, &k.params[..4]),
        ("softmax_masked", &[48, 128, 1, 12][..])
    );
    assert_eq!(k.workgroups, [48, 1, 1]);

    let k = kernel(&Op::Embedding {
        vocab: 30522,
        dim: 384,
        rows: 10,
        weight_format: WeightFormat::F32,
    })
    .unwrap();
    assert_eq!(&k.params[..7], &[30522, 384, 10, 0, 384, 1, 3840]);
    assert_eq!(k.workgroups, [60, 1, 1]);
}

/// Counts cover the work, never exceed 65535 per dimension, and spill into y when needed.
#[test]
fn workgroup_counts_cover_the_work_and_spill_into_y() {
    let cover = |op: &Op, units: u64| {
        let k = kernel(op).unwrap();
        let [x, y, z] = k.workgroups;
        assert!(x >= 1 && y >= 1 && z == 1, "{op:?}: {:?}", k.workgroups);
        assert!(x <= MAX_WORKGROUPS_PER_DIM && y <= MAX_WORKGROUPS_PER_DIM);
        let total = u64::from(x) * u64::from(y);
        assert!(total >= units, "{op:?}: {total} groups for {units}");
        // Spilling wastes less than one row of x.
        assert!(total - units < u64::from(x), "{op:?}: {:?}", k.workgroups);
        k.workgroups
    };
    for op in sample_ops() {
        let sig = op.signature().unwrap();
        let units = match op {
            Op::MatMul { batch, m, n, .. } => {
                u64::from(batch) * u64::from(m.div_ceil(32)) * u64::from(n.div_ceil(32))
            }
            Op::Softmax { rows, .. }
            | Op::LayerNorm { rows, .. }
            | Op::L2Normalize { rows, .. }
            | Op::RmsNorm { rows, .. } => u64::from(rows),
            Op::PagedAttention {
                tokens, q_heads, ..
            } => u64::from(tokens) * u64::from(q_heads),
            Op::KvWrite { kv, tokens, .. } => {
                u64::from(tokens * llm::kv_write_groups(&kv, tokens)).div_ceil(64)
            }
            _ => sig.outputs[0].len.div_ceil(64),
        };
        cover(&op, units);
    }
    // The largest elementwise op: 2^32 - 1 elements, 2^26 workgroups.
    let wg = cover(&Op::Relu { len: u32::MAX }, 1 << 26);
    assert_eq!(wg, [65_535, 1_025, 1]);
    // 65535 groups exactly still fit in x; one more spills.
    assert_eq!(
        cover(&Op::Gelu { len: 65_535 * 64 }, 65_535),
        [65_535, 1, 1]
    );
    assert_eq!(
        cover(
            &Op::Gelu {
                len: 65_535 * 64 + 1
            },
            65_536
        ),
        [65_535, 2, 1]
    );
    // Row kernels spill by rows.
    let op = Op::Softmax {
        rows: 200_000,
        cols: 3,
        masked: false,
        rows_per_mask: 1,
    };
    assert_eq!(cover(&op, 200_000), [65_535, 4, 1]);
    // Matmul tiles spill too: 4096 batches of 32 tiles.
    let op = Op::batched_matmul(4096, 128, 256, 1);
    assert_eq!(cover(&op, 4096 * 32), [65_535, 3, 1]);
}

#[test]
fn oversized_or_invalid_ops_are_errors() {
    let op = Op::Embedding {
        vocab: 100_000,
        dim: 100_000,
        rows: 1,
        weight_format: WeightFormat::F32,
    };
    match kernel(&op) {
        Err(Error::TooLarge {
            requested, limit, ..
        }) => {
            assert_eq!(requested, 100_000 * 100_000 * 4);
            assert_eq!(limit, u64::from(u32::MAX) * 4);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(matches!(
        kernel(&Op::Add { len: 10, b_len: 3 }),
        Err(Error::Argument(crate::ArgumentError::NotMultiple { .. }))
    ));
    assert!(matches!(
        kernel(&Op::Relu { len: 0 }),
        Err(Error::Argument(crate::ArgumentError::Zero { .. }))
    ));
}
