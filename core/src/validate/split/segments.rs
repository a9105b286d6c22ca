//! Ops over tensors split into segments across blocks (a tensor larger than the device's largest
//! block; see [`Tensor`](crate::Tensor)), cut into dispatches that each bind within one segment.
//!
//! The cut follows the same axis as a split over one binding ([`super`]): every part is the op
//! over a range of units, binding the matching sub-range of each operand that grows with the
//! units and the whole of each operand that does not. Part boundaries are every segment boundary
//! of every growing operand (in units), and within the stretch between two boundaries, pieces of
//! at most as many units as the largest binding allows. An operand the op reads whole, an op with
//! no such axis, or a segment boundary inside a unit cannot be cut so: the op is refused with
//! [`Error::SegmentedOperand`] naming the operand.
//!
//! A part starting inside a segment (at another operand's boundary, or after a binding-sized
//! piece) must start on `binding_align` there; the runtime cuts its tensors so that it does (every
//! segment holds a multiple of `binding_align / element size` outermost slices), and a part that
//! would not is refused the same way, never bound misaligned.

use std::collections::BTreeSet;

use super::{Part, Share, gcd, lcm};
use crate::backend::BlockRange;
use crate::ops::Op;
use crate::{Error, Result};

/// The parts of `op` over `operands`, each given as its segments in order (a one-segment operand
/// is an ordinary binding), with every binding at most `limit` bytes, within one segment, and at
/// an offset on `align`.
///
/// # Errors
/// [`Error::BindingCount`] / [`Error::BindingSize`] when the operands' total sizes do not match
/// the op; [`Error::SegmentedOperand`] when the op cannot be cut so; [`Error::TooLarge`] when one
/// unit of an operand exceeds `limit`.
pub(crate) fn split_segments(
    op: &Op,
    operands: &[&[BlockRange]],
    limit: u64,
    align: u64,
) -> Result<Vec<Part>> {
    let sizes: Vec<u64> = operands
        .iter()
        .map(|segs| segs.iter().fold(0u64, |n, r| n.saturating_add(r.size)))
        .collect();
    op.check_binding_sizes(&sizes)?;
    let names = op.operand_names();
    let refuse = |i: usize, reason: String| Error::SegmentedOperand {
        op: op.name().to_string(),
        operand: names.get(i).copied().unwrap_or("?").to_string(),
        binding: i,
        segments: operands.get(i).map_or(0, |s| s.len()),
        reason,
    };
    let segmented = operands.iter().position(|s| s.len() > 1).unwrap_or(0);
    let (Some(total), Some(shares)) = (op.split_units(), op.split_shares()) else {
        return Err(refuse(
            segmented,
            "the op has no outermost axis whose units it computes independently".into(),
        ));
    };
    if shares.len() != operands.len() {
        return Err(refuse(
            segmented,
            "the op's operands do not follow its axis".into(),
        ));
    }
    let align = align.max(1);
    let mut cuts = BTreeSet::from([0u64, u64::from(total)]);
    let mut step = 1u64;
    let mut most = u64::from(total);
    let mut widest = 0u64;
    for (i, (share, segs)) in shares.iter().zip(operands).enumerate() {
        match *share {
            Share::Whole if segs.len() != 1 => {
                return Err(refuse(
                    i,
                    "every part of the op reads this operand whole (a weight, bias or mask the \
                     units share), so it must lie in one block"
                        .into(),
                ));
            }
            Share::Whole => {}
            Share::PerUnit(bytes) => {
                step = lcm(step, align / gcd(bytes, align))
                    .ok_or_else(|| refuse(i, "the alignment step overflows".into()))?;
                most = most.min(limit / bytes);
                widest = widest.max(bytes);
                let mut end = 0u64;
                for s in &segs[..segs.len().saturating_sub(1)] {
                    end += s.size;
                    if !end.is_multiple_of(bytes) {
                        return Err(refuse(
                            i,
                            format!(
                                "a segment ends at byte {end}, inside one of the op's units of \
                                 {bytes} bytes"
                            ),
                        ));
                    }
                    cuts.insert(end / bytes);
                }
            }
        }
    }
    let per_part = most / step * step;
    if per_part == 0 {
        return Err(Error::TooLarge {
            what: "one unit of a split op's binding",
            requested: widest,
            limit,
            limit_name: "max_binding_size",
        });
    }
    let cuts: Vec<u64> = cuts.into_iter().collect();
    let mut parts = Vec::new();
    for w in cuts.windows(2) {
        let mut first = w[0];
        while first < w[1] {
            let r = per_part.min(w[1] - first);
            let mut ranges = Vec::with_capacity(operands.len());
            for (i, (share, segs)) in shares.iter().zip(operands).enumerate() {
                ranges.push(match *share {
                    Share::Whole => segs.first().copied().unwrap_or(BlockRange {
                        block: crate::backend::BlockId(0),
                        offset: 0,
                        size: 0,
                    }),
                    Share::PerUnit(bytes) => {
                        let (seg, offset) = locate(segs, first * bytes).ok_or_else(|| {
                            Error::invariant(
                                "a part starts inside its operands (sizes checked against the op)",
                                format!("{} binding {i} at unit {first}", op.name()),
                            )
                        })?;
                        if !(seg.offset + offset).is_multiple_of(align) {
                            return Err(refuse(
                                i,
                                format!(
                                    "a part would bind it from byte {offset} of a segment, not \
                                     on the binding alignment of {align} bytes"
                                ),
                            ));
                        }
                        BlockRange {
                            offset: seg.offset + offset,
                            size: r * bytes,
                            ..seg
                        }
                    }
                });
            }
            // `r` is at most `total`, a `u32`.
            parts.push((op.restricted(r as u32), ranges));
            first += r;
        }
    }
    Ok(parts)
}

/// The segment holding byte `at` of an operand, and `at`'s offset in it (`None` past its end).
fn locate(segs: &[BlockRange], at: u64) -> Option<(BlockRange, u64)> {
    let mut start = 0u64;
    for s in segs {
        if at < start + s.size {
            return Some((*s, at - start));
        }
        start += s.size;
    }
    None
}

#[cfg(test)]
mod tests;
