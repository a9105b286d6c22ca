//! Ops whose operands exceed one binding, split into dispatches over ranges of rows.
//!
//! WebGPU caps a storage binding at `maxStorageBufferBindingSize` (128 MiB by default in Chromium)
//! while a buffer may be larger, and Vulkan's `maxStorageBufferRange` is a cap of the same kind. An
//! op is split along its outermost independent axis (elements of an elementwise op, rows of a row
//! op, images of a convolution, rows of `A` in a `Linear`): every part is the same op over fewer
//! units, binding the matching sub-range of each operand that grows with the units and the whole of
//! each operand that does not (weights, biases, masks of a shared shape). Parts run in order on the
//! device queue, like the one dispatch they replace.
//!
//! Which operands grow is derived, not listed: an operand of the op over two units is either as
//! large as over one unit (bound whole) or twice as large (split, 4-byte elements only). Part
//! offsets stay on `binding_align`. An op with no such axis ([`Op::Permute`] that moves the
//! outermost axis, `A` transposed in an unbatched matmul), or whose whole operands or single unit
//! exceed the limit, is not split: the caller refuses it as before ([`Error::TooLarge`]).

use crate::backend::BlockRange;
use crate::ops::Op;

mod segments;

pub(crate) use segments::split_segments;

/// One dispatch of a split op: the op over its units and its bindings.
pub(crate) type Part = (Op, Vec<BlockRange>);

/// How an operand's binding follows the split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// Bound whole by every part.
    Whole,
    /// `bytes` per unit: part `i` binds the units it covers.
    PerUnit(u64),
}

/// The units along the op's split axis, if it has one.
pub(crate) fn units(op: &Op) -> Option<u32> {
    Some(match *op {
        Op::Add { len, b_len } | Op::Mul { len, b_len } => {
            if b_len == len {
                len
            } else {
                len / b_len
            }
        }
        Op::Scale { len, .. } | Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } => len,
        Op::LayerNorm { rows, .. } | Op::L2Normalize { rows, .. } | Op::Embedding { rows, .. } => {
            rows
        }
        Op::Softmax {
            rows,
            masked,
            rows_per_mask,
            ..
        } => {
            if masked {
                rows / rows_per_mask
            } else {
                rows
            }
        }
        Op::MatMul {
            batch,
            m,
            trans_a,
            broadcast_b,
            ..
        } => {
            if batch > 1 && !broadcast_b {
                batch
            } else if trans_a {
                return None;
            } else {
                batch.checked_mul(m)?
            }
        }
        Op::MeanPool { batch, .. } => batch,
        Op::Conv2d { n, .. } => n,
        Op::MaxPool2d { n, c, .. } => n.checked_mul(c)?,
        Op::Permute { dims, perm } => {
            if perm[0] != 0 {
                return None;
            }
            dims[0]
        }
        Op::RmsNorm { rows, .. } => rows,
        Op::Rope { tokens, .. } => tokens,
        Op::SiluMul { len } => len,
        // Block tables and segments are indexed globally: no independent axis to cut.
        Op::KvWrite { .. } | Op::PagedAttention { .. } => return None,
    })
}

/// `op` over `r` of its units (see [`units`]).
pub(crate) fn restrict(op: &Op, r: u32) -> Op {
    let mut op = op.clone();
    match &mut op {
        Op::Add { len, b_len } | Op::Mul { len, b_len } => {
            if *b_len == *len {
                (*len, *b_len) = (r, r);
            } else {
                *len = r * *b_len;
            }
        }
        Op::Scale { len, .. } | Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } => *len = r,
        Op::LayerNorm { rows, .. } | Op::L2Normalize { rows, .. } | Op::Embedding { rows, .. } => {
            *rows = r;
        }
        Op::Softmax {
            rows,
            masked,
            rows_per_mask,
            ..
        } => *rows = if *masked { r * *rows_per_mask } else { r },
        Op::MatMul {
            batch,
            m,
            broadcast_b,
            ..
        } => {
            if *batch > 1 && !*broadcast_b {
                *batch = r;
            } else {
                (*batch, *m) = (1, r);
            }
        }
        Op::MeanPool { batch, .. } => *batch = r,
        Op::Conv2d { n, .. } => *n = r,
        Op::MaxPool2d { n, c, .. } => (*n, *c) = (r, 1),
        Op::Permute { dims, .. } => dims[0] = r,
        Op::RmsNorm { rows, .. } => *rows = r,
        Op::Rope { tokens, .. } => *tokens = r,
        Op::SiluMul { len } => *len = r,
        Op::KvWrite { .. } | Op::PagedAttention { .. } => {}
    }
    op
}

/// How each operand of `op` follows the split, from the op over one and over two units.
pub(crate) fn shares(op: &Op) -> Option<Vec<Share>> {
    let one = restrict(op, 1).signature().ok()?;
    let two = restrict(op, 2).signature().ok()?;
    let pairs = one
        .inputs
        .iter()
        .chain(&one.outputs)
        .zip(two.inputs.iter().chain(&two.outputs));
    pairs
        .map(|(a, b)| {
            if a == b {
                Some(Share::Whole)
            } else if b.len == 2 * a.len && a.dtype.size() == 4 {
                Some(Share::PerUnit(a.size()))
            } else {
                None
            }
        })
        .collect()
}

/// How `op` splits under `limit` and `align`: each operand's share and the units per part, or
/// `None` when it cannot be split so (`sizes`: its binding sizes).
fn plan(op: &Op, sizes: &[u64], limit: u64, align: u64) -> Option<(Vec<Share>, u32)> {
    let total = units(op)?;
    let shares = shares(op)?;
    if shares.len() != sizes.len() {
        return None;
    }
    // Units per part: as many as the largest per-unit operand allows, a multiple of the step that
    // keeps every per-unit operand's part offsets on `align`.
    let mut step = 1u64;
    let mut most = u64::from(total);
    for (share, &size) in shares.iter().zip(sizes) {
        match *share {
            Share::Whole if size > limit => return None,
            Share::Whole => {}
            Share::PerUnit(bytes) => {
                step = lcm(step, align.max(1) / gcd(bytes, align.max(1)))?;
                most = most.min(limit / bytes);
            }
        }
    }
    let per_part = u32::try_from(most / step * step).ok()?;
    (per_part > 0).then_some((shares, per_part))
}

impl Op {
    /// How this op is cut into parts over large operands, per operand in binding order: `Some([units,
    /// elements per unit])` for an operand that grows with the op's split axis (elements, rows,
    /// images, batches), `None` for one every part reads whole (weights, biases, shared masks).
    /// A tensor of the `Some` shape larger than the device's largest block is held in segments
    /// cut between units, which the op runs over part by part; an operand read whole must fit in
    /// one block. `None` for an op with no split axis.
    pub fn split_shapes(&self) -> Option<Vec<Option<[usize; 2]>>> {
        let total = units(self)? as usize;
        let sig = self.signature().ok()?;
        let shares = shares(self)?;
        let operands = sig.operands();
        Some(
            shares
                .iter()
                .zip(operands)
                .map(|(share, o)| match *share {
                    Share::Whole => None,
                    Share::PerUnit(bytes) => Some([total, (bytes / o.dtype.size()) as usize]),
                })
                .collect(),
        )
    }
}

/// Whether `op` runs on a device whose bindings hold at most `limit` bytes at offsets on
/// `align`: every operand fits, or the front splits it.
pub(crate) fn fits(op: &Op, limit: u64, align: u64) -> bool {
    let Ok(sig) = op.signature() else {
        return false;
    };
    let sizes: Vec<u64> = sig.operands().map(|o| o.size()).collect();
    sizes.iter().all(|&s| s <= limit) || plan(op, &sizes, limit, align).is_some()
}

/// The parts of `op` over `bindings` with every binding at most `limit` bytes and every part
/// offset on `align` (given on-align bindings), or `None` when `op` cannot be split so.
pub(crate) fn split(op: &Op, bindings: &[BlockRange], limit: u64, align: u64) -> Option<Vec<Part>> {
    let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
    let (shares, per_part) = plan(op, &sizes, limit, align)?;
    let total = units(op)?;
    let mut parts = Vec::new();
    let mut first = 0u32;
    while first < total {
        let r = per_part.min(total - first);
        let ranges = shares
            .iter()
            .zip(bindings)
            .map(|(share, b)| match *share {
                Share::Whole => *b,
                Share::PerUnit(bytes) => BlockRange {
                    offset: b.offset + u64::from(first) * bytes,
                    size: u64::from(r) * bytes,
                    ..*b
                },
            })
            .collect();
        parts.push((restrict(op, r), ranges));
        first += r;
    }
    Some(parts)
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

pub(crate) fn lcm(a: u64, b: u64) -> Option<u64> {
    (a / gcd(a, b)).checked_mul(b)
}

#[cfg(test)]
mod tests;
