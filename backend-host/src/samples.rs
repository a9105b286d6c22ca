//! Sample op instances and inputs for checking a backend against the host reference.
//!
//! The conformance suite and each backend's own tests check every op the same way: run it on the
//! device, run [`host::run`] on the same inputs, compare. This module holds that
//! shared part once: representative instances of every op (odd sizes that do not fill a workgroup,
//! every transpose combination, a dispatch large enough to spill into a second grid dimension),
//! deterministic inputs suited to each op, the reference output, and the comparison rule (1e-5
//! relative with a floor of 1 on the magnitude for f32 arithmetic, bit-exact for data movement).
//!
//! Test support, not API: compiled only with the `test-support` feature, which the conformance
//! suite and the backends' test builds enable, and in core's own tests.

use crate::Result;
use crate::kernels as host;
use crate::ops::quant::f32_to_f16;
use crate::ops::{DType, Op, WeightFormat};

mod llm;
mod split;
pub mod support;

pub use llm::initial_output;
pub use split::{segment_instances, split_instances};

/// A small deterministic generator (xorshift64*), so a failing case replays.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by 1).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[-1, 1)`.
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Representative instances of every op, each weight-reading one also with f16, int8 and
/// int8-dynamic weights (conv2d refuses the last): rows of odd length (int8 rows straddle 32-bit
/// words; odd f16 counts end mid-word), per-channel and per-group scales with a partial last
/// group, transposed and per-batch `b`.
pub fn instances() -> Vec<Op> {
    let mut ops = f32_instances();
    let int8 = |group| WeightFormat::Int8 { group };
    let dynamic = |group| WeightFormat::Int8Dynamic { group };
    let mm = |batch, m, n, k, trans_b, broadcast_b, bias| {
        Op::matmul((batch, m, n, k), false, trans_b, broadcast_b, bias, 1.0)
    };
    let conv = |c_in, c_out, kh, kw, bias| Op::conv2d((2, c_in, 7, 9), c_out, (kh, kw), 1, 1, bias);
    let emb = |vocab, dim| Op::Embedding {
        vocab,
        dim,
        rows: 19,
        weight_format: WeightFormat::F32,
    };
    ops.extend(llm::instances());
    for (op, format) in [
        (mm(1, 5, 7, 13, true, true, true), WeightFormat::F16),
        (mm(2, 9, 13, 31, false, false, false), WeightFormat::F16),
        (mm(1, 5, 7, 13, true, true, true), int8(0)),
        (mm(3, 6, 5, 13, true, true, false), int8(4)),
        (mm(2, 33, 35, 70, false, false, true), int8(0)),
        (mm(2, 9, 13, 31, false, true, true), int8(8)),
        (mm(1, 5, 7, 13, true, true, true), dynamic(0)),
        (mm(2, 33, 35, 70, false, false, true), dynamic(32)),
        (mm(3, 6, 5, 13, true, true, false), dynamic(4)),
        (emb(40, 33), dynamic(8)),
        (conv(3, 5, 3, 3, true), WeightFormat::F16),
        (conv(3, 5, 3, 3, false), int8(0)),
        (conv(2, 3, 2, 3, true), int8(5)),
        (emb(51, 25), WeightFormat::F16),
        (emb(51, 25), int8(0)),
        (emb(40, 33), int8(8)),
    ] {
        ops.push(op.with_weight_format(format));
    }
    ops
}

/// Where `op`'s operands (inputs, then outputs, in signature order) lie in one block when each
/// starts at a multiple of `align`, as the arena lays tensors out: `(offsets, sizes, block size)`.
///
/// # Errors
/// As [`Op::signature`].
pub fn packed(op: &Op, align: u64) -> Result<(Vec<u64>, Vec<u64>, u64)> {
    let sig = op.signature()?;
    let sizes: Vec<u64> = sig.operands().map(|o| o.size()).collect();
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut end = 0u64;
    for s in &sizes {
        offsets.push(end);
        end = (end + s).div_ceil(align) * align;
    }
    Ok((offsets, sizes, end))
}

/// A 1×1 convolution whose padding, near 2^31, overflows its output shape's arithmetic: refused
/// with `ArithmeticOverflow` before any work.
pub fn overflowing_conv() -> Op {
    Op::conv2d((1, 1, 2, 2), 1, (1, 1), 1, (1 << 31) + 5, false)
}

fn f32_instances() -> Vec<Op> {
    vec![
        Op::matmul((1, 1, 1, 1), false, false, false, false, 1.0),
        Op::matmul((1, 17, 33, 65), false, false, false, false, 1.0),
        Op::matmul((3, 16, 32, 48), true, false, false, false, 0.5),
        Op::matmul((2, 19, 23, 37), false, true, false, false, 1.0),
        Op::matmul((2, 9, 13, 31), true, true, false, true, -2.0),
        Op::matmul((4, 7, 40, 24), false, true, true, true, 1.0),
        Op::matmul((1, 64, 64, 64), true, true, false, false, 0.75),
        Op::matmul((1, 64, 64, 300), false, false, false, true, 0.125),
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
        // Enough elements that a 1-D dispatch of 64-wide workgroups spills from x into y.
        Op::Relu { len: 4_200_000 },
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
            weight_format: WeightFormat::F32,
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
        Op::conv2d((2, 3, 9, 11), 5, (3, 3), 1, 1, true),
        Op::conv2d((1, 2, 8, 8), 4, (2, 3), 2, 0, false),
        Op::max_pool2d((2, 3, 8, 9), 2, 2),
        Op::max_pool2d((1, 2, 7, 7), 3, 1),
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

/// Input bytes suited to `op`: token ids within the vocabulary (and one beyond it, which must give
/// a zero row), 0/1 masks whose first row drops everything, values in `[-1.5, 1.5)` otherwise.
///
/// # Errors
/// [`ArgumentError`](crate::ArgumentError) for an invalid op.
pub fn inputs(op: &Op, rng: &mut Rng) -> Result<Vec<Vec<u8>>> {
    let sig = op.signature()?;
    if let Some(inputs) = llm::inputs(op, rng) {
        return Ok(inputs);
    }
    Ok(sig
        .inputs
        .iter()
        .enumerate()
        .map(|(i, o)| match (op, o.dtype, i) {
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
            (_, DType::F16, _) => padded(
                (0..o.len)
                    .flat_map(|_| f32_to_f16(rng.f32() * 1.5).to_le_bytes())
                    .collect(),
            ),
            (_, DType::I8, _) => padded(
                (0..o.len)
                    .map(|_| (rng.below(255) as i32 - 127) as i8 as u8)
                    .collect(),
            ),
            // Int8 scales: positive, about what max|w| / 127 gives for weights of magnitude 1.
            (_, DType::F32, i)
                if op.weight_format().has_scales() && op.operand_names()[i] == "scales" =>
            {
                (0..o.len)
                    .flat_map(|_| ((rng.f32() + 1.5) * 0.01).to_le_bytes())
                    .collect()
            }
            (Op::Softmax { masked: true, .. } | Op::MeanPool { .. }, _, 1) => (0..o.len)
                .flat_map(|j| {
                    let keep = j >= 10 && rng.below(10) < 7;
                    (if keep { 1.0f32 } else { 0.0 }).to_le_bytes()
                })
                .collect(),
            _ => (0..o.len)
                .flat_map(|_| (rng.f32() * 1.5).to_le_bytes())
                .collect(),
        })
        .collect())
}

/// `bytes` padded with zeros to whole 32-bit words, as an f16 or int8 operand is bound.
fn padded(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    bytes
}

/// The host reference's output for `op` on `inputs`, starting from [`initial_output`] for an op
/// that [updates its output](Op::updates_output) (a device run must start from the same bytes).
///
/// # Errors
/// As [`host::run`].
pub fn reference(op: &Op, inputs: &[Vec<u8>]) -> Result<Vec<u8>> {
    let sig = op.signature()?;
    let mut out = initial_output(op).unwrap_or_else(|| vec![0u8; sig.outputs[0].size() as usize]);
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    host::run(op, &refs, &mut [out.as_mut_slice()])?;
    Ok(out)
}

/// Whether `op` only moves or selects values, so a device must reproduce the reference exactly.
pub fn exact(op: &Op) -> bool {
    matches!(
        op,
        Op::Copy { .. }
            | Op::Permute { .. }
            | Op::Embedding { .. }
            | Op::Relu { .. }
            | Op::MaxPool2d { .. }
    )
}

/// Compares f32 bytes: `|got − want| ≤ tol · max(|want|, 1)` per element (a NaN on either side
/// fails). Returns a description of the first mismatch.
pub fn compare_f32(got: &[u8], want: &[u8], tol: f32) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs reference {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
        let g = f32::from_le_bytes([g[0], g[1], g[2], g[3]]);
        let w = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let close = (g - w).abs() <= tol * w.abs().max(1.0);
        if !close {
            return Err(format!("element {i}: got {g}, reference {w}"));
        }
    }
    Ok(())
}

/// Checks a device output of `op` against the reference: bit-exact for [`exact`] ops, a KV
/// segment by its layout (f32 and f16 exact, int8 within a rounding), else [`compare_f32`] with
/// a tolerance of 1e-5.
pub fn check(op: &Op, got: &[u8], want: &[u8]) -> std::result::Result<(), String> {
    if let Some(result) = llm::check(op, got, want) {
        return result;
    }
    if exact(op) {
        if got == want {
            return Ok(());
        }
        return compare_f32(got, want, 0.0).and(Err(
            "bytes differ from the reference (e.g. the sign of a zero)".into(),
        ));
    }
    compare_f32(got, want, 1e-5)
}
