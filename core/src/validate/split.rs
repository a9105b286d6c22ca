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
//! The op's axis, its units and which operands grow with them are facts of the op
//! ([`crate::ops::split`]); this module cuts bindings by them. Part offsets stay on
//! `binding_align`. An op with no such axis ([`Op::Permute`] that moves the
//! outermost axis, `A` transposed in an unbatched matmul), or whose whole operands or single unit
//! exceed the limit, is not split: the caller refuses it as before ([`Error::TooLarge`]).

use crate::backend::BlockRange;
use crate::ops::Op;
use crate::ops::split::Share;

mod segments;

pub(crate) use segments::split_segments;

/// One dispatch of a split op: the op over its units and its bindings.
pub(crate) type Part = (Op, Vec<BlockRange>);

/// How `op` splits under `limit` and `align`: each operand's share and the units per part, or
/// `None` when it cannot be split so (`sizes`: its binding sizes).
fn plan(op: &Op, sizes: &[u64], limit: u64, align: u64) -> Option<(Vec<Share>, u32)> {
    let total = op.split_units()?;
    let shares = op.split_shares()?;
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
    let total = op.split_units()?;
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
        parts.push((op.restricted(r), ranges));
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
