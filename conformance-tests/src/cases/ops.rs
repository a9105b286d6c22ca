//! Every op on the target against the host reference (`tensormem::ops::host`): 1e-5 relative for
//! f32 (with a floor of 1 on the magnitude), exact for integer ops.

use tensormem::ops::{DType, Op, Operand, host};
use tensormem::{BlockRange, Runtime, RuntimeConfig};

use super::Rng;
use crate::{Case, Ctx, check, fail};

type R = std::result::Result<(), String>;

pub(crate) fn cases() -> Vec<Case> {
    vec![Case {
        name: "ops_match_host_reference",
        run: ops_match_host,
    }]
}

/// Representative instances of every op, with odd sizes that do not fill a workgroup.
pub fn op_instances() -> Vec<Op> {
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
        mm(2, 19, 23, 37, false, true, false, false, 1.0),
        mm(2, 9, 13, 31, true, true, false, true, -2.0),
        mm(4, 7, 40, 24, false, true, true, true, 1.0),
        mm(1, 64, 64, 300, false, false, false, true, 0.125),
        Op::Add {
            len: 1000,
            b_len: 1000,
        },
        Op::Add {
            len: 1001,
            b_len: 7,
        },
        Op::Mul {
            len: 4096,
            b_len: 64,
        },
        Op::Mul { len: 33, b_len: 33 },
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
        Op::LayerNorm {
            rows: 1,
            cols: 7,
            eps: 1e-5,
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
        Op::MaxPool2d {
            n: 1,
            c: 2,
            h: 7,
            w: 7,
            k: 3,
            stride: 1,
        },
        Op::Permute {
            dims: [2, 5, 3, 4],
            perm: [0, 2, 1, 3],
        },
        Op::Permute {
            dims: [3, 4, 5, 6],
            perm: [3, 1, 0, 2],
        },
        Op::Permute {
            dims: [1, 1, 17, 9],
            perm: [0, 1, 3, 2],
        },
        Op::Copy { len: 4097 },
    ]
}

/// Random operand bytes suited to the op: ids within (and one beyond) the vocabulary, 0/1 masks.
pub fn random_inputs(op: &Op, rng: &mut Rng) -> Result<Vec<Vec<u8>>, String> {
    let sig = op.signature().map_err(fail("signature"))?;
    Ok(sig
        .inputs
        .iter()
        .enumerate()
        .map(|(i, o): (usize, &Operand)| match (op, o.dtype, i) {
            (Op::Embedding { vocab, .. }, DType::U32, _) => (0..o.len)
                .flat_map(|j| {
                    let id = if j == 3 {
                        *vocab + 5
                    } else {
                        rng.below(u64::from(*vocab)) as u32
                    };
                    id.to_le_bytes()
                })
                .collect(),
            (Op::Softmax { masked: true, .. } | Op::MeanPool { .. }, _, 1) => (0..o.len)
                .flat_map(|j| {
                    // Row 0 of the mask keeps nothing (the fully-masked case); the rest keep ~70%.
                    let keep = j >= 10 && rng.below(10) < 7;
                    (if keep { 1.0f32 } else { 0.0 }).to_le_bytes()
                })
                .collect(),
            _ => (0..o.len)
                .flat_map(|_| (rng.f32() * 3.0).to_le_bytes())
                .collect(),
        })
        .collect())
}

/// Runs `op` on the target through runtime tensors and returns the output bytes.
pub fn run_on_target(rt: &Runtime, op: &Op, inputs: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let sig = op.signature().map_err(fail("signature"))?;
    let mut tensors = Vec::new();
    for (data, o) in inputs.iter().zip(&sig.inputs) {
        tensors.push(
            rt.tensor_from(DType::U8, &[data.len()], data, "op input")
                .map_err(fail(&format!("{} input {:?}", op.name(), o)))?,
        );
    }
    let out = rt
        .alloc(DType::U8, &[sig.outputs[0].size() as usize], "op output")
        .map_err(fail("output"))?;
    tensors.push(out);
    let pool = rt.device_pool();
    let bindings = tensors
        .iter()
        .map(|t| {
            pool.resolve(t.allocation().handle).map(|r| BlockRange {
                size: t.size(),
                ..r
            })
        })
        .collect::<tensormem::Result<Vec<_>>>()
        .map_err(fail("resolve"))?;
    let ticket = rt
        .backend()
        .dispatch(op, &bindings)
        .map_err(fail(&format!("dispatch {op:?}")))?;
    for t in &tensors {
        pool.mark_used(t.allocation().handle, ticket)
            .map_err(fail("mark"))?;
    }
    let result = rt
        .download::<u8>(&tensors[tensors.len() - 1])
        .map_err(fail("download"))?;
    for t in tensors {
        rt.free(t).map_err(fail("free"))?;
    }
    Ok(result)
}

/// Compares two f32 byte buffers: |a − b| ≤ tol · max(|b|, 1).
pub fn compare_f32(got: &[u8], want: &[u8], tol: f32, what: &str) -> R {
    check(got.len() == want.len(), || {
        format!("{what}: length {} vs {}", got.len(), want.len())
    })?;
    for (i, (g, w)) in got.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
        let g = f32::from_le_bytes([g[0], g[1], g[2], g[3]]);
        let w = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        // Written so that a NaN on either side fails.
        let close = (g - w).abs() <= tol * w.abs().max(1.0);
        if !close {
            return Err(format!("{what}: element {i}: got {g}, reference {w}"));
        }
    }
    Ok(())
}

fn ops_match_host(ctx: &Ctx) -> R {
    let rt =
        Runtime::new(ctx.backend.clone(), RuntimeConfig::default()).map_err(fail("runtime"))?;
    let mut rng = Rng::new(7);
    for op in op_instances() {
        let inputs = random_inputs(&op, &mut rng)?;
        let sig = op.signature().map_err(fail("signature"))?;
        let mut want = vec![0u8; sig.outputs[0].size() as usize];
        let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        host::run(&op, &refs, &mut [want.as_mut_slice()]).map_err(fail("host reference"))?;
        let got = run_on_target(&rt, &op, &inputs)?;
        let exact = matches!(
            op,
            Op::Copy { .. }
                | Op::Permute { .. }
                | Op::Embedding { .. }
                | Op::Relu { .. }
                | Op::MaxPool2d { .. }
        );
        compare_f32(
            &got,
            &want,
            if exact { 0.0 } else { 1e-5 },
            &format!("{op:?}"),
        )?;
    }
    Ok(())
}
