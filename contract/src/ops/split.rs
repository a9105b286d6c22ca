//! How an op cuts along its outermost independent axis: the facts about the op alone that the
//! binding splitter (`validate::split`), segmented tensors and graph tiling (`graph::tile`) build
//! on.
//!
//! An op's *units* are the independent pieces of that axis (elements of an elementwise op, rows
//! of a row op, images of a convolution, rows of `A` in a `Linear`, matrices of an unbatched
//! product's batch). The op over `r` units ([`Op::restricted`]) is the same op over fewer of them.
//! Which operands grow with the units is derived, not listed ([`Op::split_shares`]): an operand of
//! the op over two units is either as large as over one (read whole) or twice as large (cut per
//! unit, 4-byte elements only). Whether cutting a product by rows keeps the reference's bits is
//! a fact of its arithmetic ([`Op::rows_split_exact`]): the host computes a product with its dot
//! kernel or with `sgemm` by shape alone ([`reference_uses_dot`]), and the two round differently.
//!
//! Costs: each fact is a match on the op; [`Op::split_shares`] computes two signatures.

use super::{Op, WeightFormat};

/// How an operand's binding follows the split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Share {
    /// Bound whole by every part.
    Whole,
    /// `bytes` per unit: part `i` binds the units it covers.
    PerUnit(u64),
}

/// Whether the reference (the host's `kernels::matmul`) computes a product of `m` rows over an
/// inner dimension `k` with its dot kernel, when both operands run along `k`, rather than with
/// `sgemm`: `k` long enough for the lanes' final sums to be a small share, and not a product
/// where `sgemm`'s packing pays for itself: from 256 rows with 512-bit lanes
/// ([`super::cpu::wide_vectors`], where `sgemm`'s AVX-512 kernels outrun the dot kernel), and
/// with 256-bit lanes only when `k` is long too. (The 512-bit kernels win from about 64 rows, but
/// a bound that low would refuse row splits of attention-sized products that tile today:
/// `docs/decisions/host-wide-lanes-variants.md`.) Shape and CPU only, never the tiling, so every
/// element is computed the same way on any number of threads.
#[doc(hidden)]
pub fn reference_uses_dot(m: usize, k: usize) -> bool {
    k >= 128 && (m < 256 || (k <= 512 && !super::cpu::wide_vectors()))
}

impl Op {
    /// The units along the op's split axis, if it has one.
    pub fn split_units(&self) -> Option<u32> {
        Some(match *self {
            Op::Add { len, b_len } | Op::Mul { len, b_len } => {
                if b_len == len {
                    len
                } else {
                    len / b_len
                }
            }
            Op::Scale { len, .. } | Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } => len,
            Op::LayerNorm { rows, .. }
            | Op::L2Normalize { rows, .. }
            | Op::Embedding { rows, .. } => rows,
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

    /// The op over `r` of its units ([`Op::split_units`]).
    pub fn restricted(&self, r: u32) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Add { len, b_len } | Op::Mul { len, b_len } => {
                if *b_len == *len {
                    (*len, *b_len) = (r, r);
                } else {
                    *len = r * *b_len;
                }
            }
            Op::Scale { len, .. } | Op::Gelu { len } | Op::Relu { len } | Op::Copy { len } => {
                *len = r
            }
            Op::LayerNorm { rows, .. }
            | Op::L2Normalize { rows, .. }
            | Op::Embedding { rows, .. } => {
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

    /// How each operand follows the split, from the op over one and over two units.
    pub fn split_shares(&self) -> Option<Vec<Share>> {
        let one = self.restricted(1).signature().ok()?;
        let two = self.restricted(2).signature().ok()?;
        let pairs = one.operands().zip(two.operands());
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

    /// How this op is cut into parts over large operands, per operand in binding order: `Some([units,
    /// elements per unit])` for an operand that grows with the op's split axis (elements, rows,
    /// images, batches), `None` for one every part reads whole (weights, biases, shared masks).
    /// A tensor of the `Some` shape larger than the device's largest block is held in segments
    /// cut between units, which the op runs over part by part; an operand read whole must fit in
    /// one block. `None` for an op with no split axis.
    pub fn split_shapes(&self) -> Option<Vec<Option<[usize; 2]>>> {
        let total = self.split_units()? as usize;
        let sig = self.signature().ok()?;
        let shares = self.split_shares()?;
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

    /// Whether every output row of this op (a product) comes out bit-identical when it runs over
    /// `rows` of its row units at a time instead of all of them (a graph tiled by rows:
    /// `tensormem::Graph::tile`). A product whose units are whole matrices of a batch keeps its shape
    /// per matrix: always. One whose units are rows of `A` keeps its sums when both row counts pick
    /// the same reference kernel ([`reference_uses_dot`]) and, where that kernel may be `sgemm`, when
    /// `alpha` is 1: `sgemm` rounds `alpha·Σ` once at the edge of a micro-tile (computed aside, then
    /// added) and fuses it into the accumulation inside one, so with another `alpha` a row's bits
    /// depend on where the row falls. The dot kernel computes every element the same way wherever it
    /// falls. Other ops: `true` (the reference computes each element or row on its own).
    pub fn rows_split_exact(&self, rows: u32) -> bool {
        let Op::MatMul {
            batch,
            m,
            k,
            trans_a,
            trans_b,
            broadcast_b,
            alpha,
            weight_format,
            ..
        } = *self
        else {
            return true;
        };
        if batch > 1 && !broadcast_b {
            return true; // the units are matrices: each keeps its `m`
        }
        let (full, part, k) = ((batch as usize) * (m as usize), rows as usize, k as usize);
        let dot = reference_uses_dot(full, k);
        if dot != reference_uses_dot(part, k) {
            return false;
        }
        let surely_dot = dot && trans_b && !trans_a && weight_format == WeightFormat::F32;
        surely_dot || alpha == 1.0
    }
}
