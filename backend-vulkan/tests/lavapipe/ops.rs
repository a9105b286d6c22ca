//! Every standard op against the host reference (`tensormem::ops::host::run`): 1e-5 relative for
//! f32 arithmetic, exact for data movement. All operands of an op live in one block at aligned
//! offsets, as the arena lays tensors out, so input and output share a buffer.

use tensormem::ops::host;
use tensormem::{Backend, DType, Error, MemoryKind, Op};

use crate::{alloc, bytes_f32, download, on_each, range, upload};

fn ops() -> Vec<Op> {
    let mm = |batch, m, n, k, trans_a, trans_b, broadcast_b, bias, alpha| Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
        bias,
        alpha,
    };
    vec![
        mm(1, 1, 1, 1, false, false, false, false, 1.0),
        mm(1, 17, 33, 65, false, false, false, false, 1.0),
        mm(3, 16, 32, 48, true, false, false, false, 0.5),
        mm(2, 9, 13, 31, true, true, false, true, -2.0),
        mm(4, 7, 40, 24, false, true, true, true, 1.0),
        Op::Add {
            len: 1001,
            b_len: 7,
        },
        Op::Mul {
            len: 4096,
            b_len: 64,
        },
        Op::Scale {
            len: 777,
            alpha: -0.3,
        },
        Op::Gelu { len: 1025 },
        Op::Relu { len: 999 },
        Op::LayerNorm {
            rows: 13,
            cols: 384,
            eps: 1e-12,
        },
        Op::Softmax {
            rows: 37,
            cols: 129,
            masked: false,
            rows_per_mask: 1,
        },
        Op::Softmax {
            rows: 24,
            cols: 10,
            masked: true,
            rows_per_mask: 6,
        },
        Op::Embedding {
            vocab: 50,
            dim: 24,
            rows: 33,
        },
        Op::MeanPool {
            batch: 3,
            seq: 11,
            dim: 20,
        },
        Op::L2Normalize {
            rows: 5,
            cols: 384,
            eps: 1e-12,
        },
        Op::Conv2d {
            n: 2,
            c_in: 3,
            h: 9,
            w: 11,
            c_out: 5,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            bias: true,
        },
        Op::Conv2d {
            n: 1,
            c_in: 2,
            h: 8,
            w: 8,
            c_out: 4,
            kh: 2,
            kw: 3,
            stride: 2,
            pad: 0,
            bias: false,
        },
        Op::MaxPool2d {
            n: 2,
            c: 3,
            h: 8,
            w: 9,
            k: 2,
            stride: 2,
        },
        Op::Permute {
            dims: [3, 4, 5, 6],
            perm: [3, 1, 0, 2],
        },
        Op::Copy { len: 4097 },
    ]
}

/// Deterministic inputs: ids inside the vocabulary (and one beyond), 0/1 masks with a fully
/// masked first row, values in [-1.5, 1.5) otherwise.
fn inputs(op: &Op, seed: &mut u64) -> Vec<Vec<u8>> {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u32
    };
    let sig = op.signature().unwrap();
    sig.inputs
        .iter()
        .enumerate()
        .map(|(i, o)| match (op, o.dtype, i) {
            (Op::Embedding { vocab, .. }, DType::U32, _) => (0..o.len)
                .flat_map(|j| (if j == 3 { vocab + 5 } else { next() % vocab }).to_le_bytes())
                .collect(),
            (Op::Softmax { masked: true, .. } | Op::MeanPool { .. }, _, 1) => (0..o.len)
                .flat_map(|j| {
                    (if j >= 10 && next() % 10 < 7 {
                        1.0f32
                    } else {
                        0.0
                    })
                    .to_le_bytes()
                })
                .collect(),
            _ => (0..o.len)
                .flat_map(|_| ((next() % 3000) as f32 / 1000.0 - 1.5).to_le_bytes())
                .collect(),
        })
        .collect()
}

#[test]
fn every_op_matches_the_host_reference() {
    on_each(|name, b| {
        let align = b.capabilities().binding_align;
        let mut seed = 7u64;
        for op in ops() {
            let sig = op.signature().unwrap();
            let data = inputs(&op, &mut seed);
            let sizes: Vec<u64> = sig
                .inputs
                .iter()
                .chain(&sig.outputs)
                .map(|o| o.size())
                .collect();
            let mut offsets = Vec::new();
            let mut end = 0u64;
            for s in &sizes {
                offsets.push(end);
                end = (end + s).div_ceil(align) * align;
            }
            let block = alloc(b, MemoryKind::DeviceLocal, end);
            for (i, d) in data.iter().enumerate() {
                upload(b, block, offsets[i], d);
            }
            let bindings: Vec<_> = offsets
                .iter()
                .zip(&sizes)
                .map(|(&o, &s)| range(block, o, s))
                .collect();
            b.dispatch(&op, &bindings)
                .unwrap_or_else(|e| panic!("{name}: {op:?}: {e}"));
            let out_i = sizes.len() - 1;
            let got = download(b, block, offsets[out_i], sizes[out_i]);
            let mut want = vec![0u8; sizes[out_i] as usize];
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            host::run(&op, &refs, &mut [want.as_mut_slice()]).unwrap();
            let exact = matches!(
                op,
                Op::Copy { .. }
                    | Op::Permute { .. }
                    | Op::Embedding { .. }
                    | Op::Relu { .. }
                    | Op::MaxPool2d { .. }
            );
            let tol = if exact { 0.0 } else { 1e-5 };
            for (i, (g, w)) in bytes_f32(&got).iter().zip(bytes_f32(&want)).enumerate() {
                assert!(
                    (g - w).abs() <= tol * w.abs().max(1.0),
                    "{name}: {op:?} element {i}: got {g}, host {w}"
                );
            }
            b.free_block(block).unwrap();
        }
    });
}

#[test]
fn op_binding_errors() {
    on_each(|name, b| {
        let block = alloc(b, MemoryKind::DeviceLocal, 4096);
        let relu = Op::Relu { len: 16 };
        match b.dispatch(&relu, &[range(block, 0, 64)]) {
            Err(Error::SizeMismatch {
                expected: 2,
                actual: 1,
                ..
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
        assert!(matches!(
            b.dispatch(&relu, &[range(block, 0, 60), range(block, 256, 64)]),
            Err(Error::SizeMismatch {
                expected: 64,
                actual: 60,
                ..
            })
        ));
        assert!(
            matches!(
                b.dispatch(&relu, &[range(block, 0, 64), range(block, 0, 64)]),
                Err(Error::InvalidArgument(_))
            ),
            "{name}: output overlapping its input"
        );
        assert!(matches!(
            b.dispatch(
                &Op::Relu { len: 0 },
                &[range(block, 0, 4), range(block, 256, 4)]
            ),
            Err(Error::InvalidArgument(_))
        ));
        // A larger binding than the operand is fine: only the operand's bytes are touched.
        upload(b, block, 1024, &[0xFF; 128]);
        let x: Vec<u8> = (0..16)
            .flat_map(|i| (i as f32 - 8.0).to_le_bytes())
            .collect();
        upload(b, block, 0, &x);
        b.dispatch(&relu, &[range(block, 0, 64), range(block, 1024, 128)])
            .unwrap();
        let out = download(b, block, 1024, 128);
        let ys = bytes_f32(&out[..64]);
        assert_eq!(
            ys,
            (0..16)
                .map(|i| (i as f32 - 8.0).max(0.0))
                .collect::<Vec<_>>(),
            "{name}"
        );
        assert!(
            out[64..].iter().all(|&v| v == 0xFF),
            "{name}: tail untouched"
        );
        b.free_block(block).unwrap();
    });
}

#[test]
fn op_binding_over_the_storage_limit_is_too_large() {
    on_each(|name, b| {
        let limit = b.capabilities().max_binding_size;
        let len = (limit / 4 + 1) as u32; // one element more than one binding may cover
        let size = u64::from(len) * 4;
        let align = b.capabilities().binding_align;
        let out_at = size.div_ceil(align) * align;
        let block = alloc(b, MemoryKind::DeviceLocal, out_at + size);
        match b.dispatch(
            &Op::Relu { len },
            &[range(block, 0, size), range(block, out_at, size)],
        ) {
            Err(Error::TooLarge {
                what: "binding",
                requested,
                limit: l,
                ..
            }) => {
                assert_eq!((requested, l), (size, limit), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        b.free_block(block).unwrap();
    });
}
