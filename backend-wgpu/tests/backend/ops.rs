//! Every standard op on wgpu against the host reference `tensormem::ops::host::run`: 1e-5
//! relative (with an absolute floor of 1e-5 for values near zero) for f32 arithmetic, exact for
//! pure data movement (copy, permute, embedding, relu, maxpool). Operands are placed at
//! binding-aligned offsets inside one arena block, as a planner would place them.

use tensormem::ops::{DType, Op, host};
use tensormem::{Backend, MemoryKind};
use tensormem_wgpu::WgpuBackend;

use super::{alloc, bytes, download, each_config, range, upload};

/// The op set with shapes that exercise edge tiles, broadcasting, masks and spills.
fn cases() -> Vec<Op> {
    let mm = |batch, m, n, k, trans_a, trans_b, broadcast_b, bias| Op::MatMul {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
        bias,
        alpha: 0.75,
    };
    vec![
        mm(1, 1, 1, 1, false, false, false, false),
        mm(2, 33, 17, 40, false, false, false, false),
        mm(3, 31, 65, 19, true, false, false, true),
        mm(2, 45, 24, 70, false, true, true, true),
        mm(1, 64, 64, 64, true, true, false, false),
        Op::Add {
            len: 1000,
            b_len: 1000,
        },
        Op::Add {
            len: 4096,
            b_len: 64,
        },
        Op::Mul {
            len: 999,
            b_len: 333,
        },
        Op::Scale {
            len: 777,
            alpha: -1.5,
        },
        Op::Gelu { len: 5000 },
        Op::Relu { len: 4097 },
        Op::LayerNorm {
            rows: 7,
            cols: 300,
            eps: 1e-5,
        },
        Op::LayerNorm {
            rows: 1,
            cols: 1,
            eps: 1e-5,
        },
        Op::Softmax {
            rows: 9,
            cols: 130,
            masked: false,
            rows_per_mask: 1,
        },
        Op::Softmax {
            rows: 12,
            cols: 40,
            masked: true,
            rows_per_mask: 4,
        },
        Op::Embedding {
            vocab: 50,
            dim: 24,
            rows: 37,
        },
        Op::MeanPool {
            batch: 3,
            seq: 11,
            dim: 20,
        },
        Op::L2Normalize {
            rows: 5,
            cols: 129,
            eps: 1e-12,
        },
        Op::Conv2d {
            n: 2,
            c_in: 3,
            h: 9,
            w: 11,
            c_out: 4,
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
            c_out: 3,
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
        Op::MaxPool2d {
            n: 1,
            c: 1,
            h: 5,
            w: 5,
            k: 3,
            stride: 1,
        },
        Op::Permute {
            dims: [2, 3, 4, 5],
            perm: [0, 2, 1, 3],
        },
        Op::Permute {
            dims: [1, 6, 7, 1],
            perm: [3, 2, 1, 0],
        },
        Op::Copy { len: 1234 },
        // Enough elements that the 1-D dispatch spills from x into y (65535 * 64 < 4.2M).
        Op::Relu { len: 4_200_000 },
    ]
}

/// Inputs for `op`: f32 in [-2, 2), masks of 0/1 (with a fully masked row), ids partly out of
/// range (which must give zero rows).
fn inputs(op: &Op, seed: u64) -> Vec<Vec<u8>> {
    let sig = op.signature().unwrap();
    let names = op.operand_names();
    sig.inputs
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (operand, name))| {
            let raw = bytes(seed * 31 + i as u64, operand.size() as usize);
            match (operand.dtype, *name) {
                (DType::U32, _) => {
                    let vocab = match op {
                        Op::Embedding { vocab, .. } => *vocab,
                        _ => u32::MAX,
                    };
                    raw.chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % (vocab + 3))
                        .flat_map(u32::to_le_bytes)
                        .collect()
                }
                (_, "mask") => raw
                    .chunks_exact(4)
                    .enumerate()
                    .map(|(j, c)| if j < 8 || c[0] % 3 == 0 { 0.0f32 } else { 1.0 })
                    .flat_map(f32::to_le_bytes)
                    .collect(),
                _ => raw
                    .chunks_exact(4)
                    .map(|c| {
                        let u = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        (u >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
                    })
                    .flat_map(f32::to_le_bytes)
                    .collect(),
            }
        })
        .collect()
}

fn exact(op: &Op) -> bool {
    matches!(
        op,
        Op::Copy { .. }
            | Op::Permute { .. }
            | Op::Embedding { .. }
            | Op::Relu { .. }
            | Op::MaxPool2d { .. }
    )
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs `op` on the backend over one arena block and returns its outputs.
fn run_on(b: &WgpuBackend, op: &Op, ins: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let sig = op.signature().unwrap();
    let align = b.capabilities().binding_align;
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
    let arena = alloc(b, MemoryKind::DeviceLocal, end);
    let ranges: Vec<_> = offsets
        .iter()
        .zip(&sizes)
        .map(|(&o, &s)| range(arena, o, s))
        .collect();
    for (r, data) in ranges.iter().zip(ins) {
        upload(b, *r, data);
    }
    // Poison the outputs so a kernel that skips elements is caught.
    for r in &ranges[ins.len()..] {
        upload(b, *r, &vec![0xAB; r.size as usize]);
    }
    let t = b.dispatch(op, &ranges).unwrap();
    b.wait(t).unwrap();
    let outs = ranges[ins.len()..]
        .iter()
        .map(|r| download(b, *r))
        .collect();
    b.free_block(arena).unwrap();
    outs
}

/// Runs `op` on the host reference.
fn run_host(op: &Op, ins: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let sig = op.signature().unwrap();
    let mut outs: Vec<Vec<u8>> = sig
        .outputs
        .iter()
        .map(|o| vec![0u8; o.size() as usize])
        .collect();
    let in_refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    host::run(op, &in_refs, &mut out_refs).unwrap();
    outs
}

fn compare(op: &Op, gpu: &[u8], reference: &[u8]) {
    if exact(op) {
        assert!(
            gpu == reference,
            "{op:?}: output differs from the host reference"
        );
        return;
    }
    for (i, (g, h)) in f32s(gpu).into_iter().zip(f32s(reference)).enumerate() {
        let tol = 1e-5 * h.abs().max(1.0);
        assert!(
            (g - h).abs() <= tol,
            "{op:?}: element {i}: wgpu {g} vs host {h} (tolerance {tol})"
        );
    }
}

#[test]
fn every_op_matches_the_host_reference() {
    each_config(|b| {
        for (seed, op) in cases().iter().enumerate() {
            let ins = inputs(op, seed as u64);
            let reference = run_host(op, &ins);
            let gpu = run_on(b, op, &ins);
            assert_eq!(gpu.len(), reference.len());
            for (g, h) in gpu.iter().zip(&reference) {
                compare(op, g, h);
            }
        }
    });
}

#[test]
fn pipelines_are_cached_per_kernel_key() {
    let b = super::backend(false);
    let op = Op::Add { len: 64, b_len: 64 };
    let ins = inputs(&op, 1);
    run_on(&b, &op, &ins);
    assert_eq!(b.compiled_pipelines(), 1);
    let op2 = Op::Add { len: 128, b_len: 2 };
    let ins2 = inputs(&op2, 2);
    let out = run_on(&b, &op2, &ins2);
    assert_eq!(
        b.compiled_pipelines(),
        1,
        "same key, new parameters: no recompilation"
    );
    compare(&op2, &out[0], &run_host(&op2, &ins2)[0]);
    run_on(&b, &Op::Relu { len: 8 }, &inputs(&Op::Relu { len: 8 }, 3));
    assert_eq!(b.compiled_pipelines(), 2);
}

#[test]
fn chained_ops_in_one_batch_see_each_other() {
    // Several dispatches and a copy in one open batch: each observes the previous one.
    each_config(|b| {
        let len = 1024u32;
        let size = u64::from(len) * 4;
        let align = b.capabilities().binding_align;
        let slot = size.div_ceil(align) * align;
        let arena = alloc(b, MemoryKind::DeviceLocal, 3 * slot);
        let (x, y, z) = (
            range(arena, 0, size),
            range(arena, slot, size),
            range(arena, 2 * slot, size),
        );
        let data = inputs(&Op::Relu { len }, 9).remove(0);
        upload(b, x, &data);
        b.dispatch(&Op::Scale { len, alpha: 2.0 }, &[x, y]).unwrap();
        b.dispatch(&Op::Relu { len }, &[y, z]).unwrap();
        b.copy(z, x).unwrap();
        let t = b
            .dispatch(&Op::Add { len, b_len: len }, &[x, z, y])
            .unwrap();
        b.wait(t).unwrap();
        let expect: Vec<f32> = f32s(&data)
            .iter()
            .map(|v| 2.0 * (2.0 * v).max(0.0))
            .collect();
        assert_eq!(f32s(&download(b, y)), expect);
        b.free_block(arena).unwrap();
    });
}
