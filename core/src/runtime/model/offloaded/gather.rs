//! Embedding lookups whose table never enters device memory: each run gathers, on the host, the
//! table rows that the lookup's ids select and uploads only those, so the lookup's device working
//! set is `rows × row bytes` instead of the whole table (MiniLM's word table is 46.9 MB; the rows
//! of a batch of 8 × 128 tokens are 1.5 MB).
//!
//! The lookup is rewritten to the same [`Op::Embedding`] over a table of `rows` rows: the gathered
//! rows in id order, and the ids renumbered `0..rows`. The kernel is unchanged, so the output is
//! bit for bit the unbudgeted one in every weight format (int8 scales are gathered alongside their
//! rows); an id beyond the vocabulary becomes `rows`, which the kernel turns into a row of zeros as
//! it did before.
//!
//! It applies where the host knows the ids before the run: the ids are a graph input, and the
//! table (with its scales) is a weight read by such lookups only. The table's master and the ids
//! are kept in host memory as the caller writes them. The gathered operands are
//! [`TensorClass::Staged`] tensors of the offload schedule, placed by the planner like every
//! other residency.

use crate::graph::{Graph, TensorKind};
use crate::offload::{OffloadOp, OffloadTensor, TensorClass};
use crate::ops::Op;
use crate::{Error, Result};

/// Which gathered operand a staged tensor holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// The selected table rows.
    Table,
    /// The selected rows of the int8 scales.
    Scales,
    /// The renumbered ids.
    Ids,
}

/// One lookup served from host memory (module doc).
#[derive(Clone, Debug)]
pub(super) struct RowGather {
    /// The op it rewrites.
    pub(super) step: usize,
    /// The same lookup over the gathered table.
    pub(super) op: Op,
    /// Root tensors of the table, its scales (int8) and the ids.
    pub(super) table: usize,
    pub(super) scales: Option<usize>,
    pub(super) ids: usize,
    /// Table rows.
    vocab: u64,
    /// Ids (rows of the gathered table).
    rows: u64,
    /// Bytes of one table row, of one scales row.
    row_bytes: u64,
    scale_row_bytes: u64,
    /// The staged tensors (indices after the graph's tensors), in binding order.
    pub(super) staged: Vec<(usize, Part)>,
}

/// The lookups of `graph` that can be served from host memory and gain by it (their gathered
/// operands are smaller than the table), numbering their staged tensors from `first_staged`.
///
/// # Errors
/// Signature errors of a malformed lookup.
pub(super) fn find(graph: &Graph, first_staged: usize) -> Result<Vec<RowGather>> {
    let tensors = graph.tensors();
    let root = |t| graph.root(t).index();
    // Per root: uses by any op, and uses as the table (or scales) of a lookup that qualifies.
    let mut uses = vec![0usize; tensors.len()];
    let mut table_uses = vec![0usize; tensors.len()];
    let mut found = Vec::new();
    for (k, node) in graph.nodes().iter().enumerate() {
        for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
            uses[root(t)] += 1;
        }
        let Op::Embedding {
            vocab,
            dim,
            rows,
            weight_format,
        } = node.op
        else {
            continue;
        };
        let scales = weight_format.has_scales();
        let (Some(&table), Some(&ids)) = (node.inputs.first(), node.inputs.last()) else {
            continue;
        };
        let (table, ids) = (root(table), root(ids));
        let scales = scales
            .then(|| node.inputs.get(1).map(|&s| root(s)))
            .flatten();
        let is = |i: usize, kind| tensors.get(i).is_some_and(|d| d.kind == kind);
        if !is(table, TensorKind::Weight)
            || !is(ids, TensorKind::Input)
            || scales.is_some_and(|s| !is(s, TensorKind::Weight))
        {
            continue;
        }
        let gathered = Op::Embedding {
            vocab: rows,
            dim,
            rows,
            weight_format,
        };
        let whole = node.op.signature()?;
        let sig = gathered.signature()?;
        let staged_bytes: u64 = sig.inputs.iter().map(|o| o.size()).sum();
        let table_bytes: u64 = whole.inputs[..whole.inputs.len() - 1]
            .iter()
            .map(|o| o.size())
            .sum();
        if staged_bytes >= table_bytes {
            continue;
        }
        let (vocab, rows) = (u64::from(vocab), u64::from(rows));
        let row_bytes = u64::from(dim) * weight_format.dtype().size();
        let scale_row_bytes = if scales.is_some() {
            weight_format.groups(u64::from(dim)).1 * 4
        } else {
            0
        };
        table_uses[table] += 1;
        if let Some(s) = scales {
            table_uses[s] += 1;
        }
        found.push(RowGather {
            step: k,
            op: gathered,
            table,
            scales,
            ids,
            vocab,
            rows,
            row_bytes,
            scale_row_bytes,
            staged: Vec::new(),
        });
    }
    // A table some other op reads (or that a lookup reads with other ids as its scales) must
    // stay whole on the device for that op: its lookups keep it too.
    found.retain(|g| {
        uses[g.table] == table_uses[g.table] && g.scales.is_none_or(|s| uses[s] == table_uses[s])
    });
    let mut next = first_staged;
    for g in &mut found {
        let parts: &[Part] = if g.scales.is_some() {
            &[Part::Table, Part::Scales, Part::Ids]
        } else {
            &[Part::Table, Part::Ids]
        };
        for &p in parts {
            g.staged.push((next, p));
            next += 1;
        }
    }
    Ok(found)
}

/// `items` and `ops` with every lookup of `gathers` rewritten (module doc): the table, scales and
/// ids lose that use, and the staged operands appear as [`TensorClass::Staged`] tensors, padded to
/// `copy_align`. Returns the padded sizes of the staged tensors too, in index order.
///
/// # Errors
/// Signature errors.
pub(super) fn rewrite(
    gathers: &[RowGather],
    items: &[OffloadTensor],
    ops: &[OffloadOp],
    copy_align: u64,
) -> Result<(Vec<OffloadTensor>, Vec<OffloadOp>, Vec<u64>)> {
    let mut items = items.to_vec();
    let mut ops = ops.to_vec();
    let mut sizes = Vec::new();
    for g in gathers {
        let k = g.step as u64;
        for t in [Some(g.table), g.scales, Some(g.ids)].into_iter().flatten() {
            if let Some(item) = items.get_mut(t) {
                item.uses.retain(|&u| u != k);
            }
        }
        let sig = g.op.signature()?;
        let mut bytes = sig.outputs.iter().map(|o| o.size()).sum::<u64>();
        for (&(index, _), operand) in g.staged.iter().zip(&sig.inputs) {
            let size = operand.size().next_multiple_of(copy_align.max(1));
            if index != items.len() {
                return Err(Error::invariant(
                    "staged tensors are numbered after the graph's, in order",
                    format!("tensor {index} where {} was next", items.len()),
                ));
            }
            items.push(OffloadTensor {
                size,
                class: TensorClass::Staged,
                uses: vec![k],
            });
            sizes.push(size);
            bytes += size;
        }
        if let Some(op) = ops.get_mut(g.step) {
            op.bytes = bytes;
        }
    }
    Ok((items, ops, sizes))
}

impl RowGather {
    /// The bytes of staged operand `part` for this run, `size` bytes long (padding zeroed), from
    /// the host copies `host` of the table, its scales and the ids (an empty copy reads as
    /// zeros: a weight or input never written).
    pub(super) fn gather(&self, part: Part, host: &[Vec<u8>], size: u64) -> Vec<u8> {
        let empty = Vec::new();
        let copy = |t: usize| host.get(t).unwrap_or(&empty);
        let ids = copy(self.ids);
        let id = |i: u64| -> u64 {
            let at = (i * 4) as usize;
            ids.get(at..at + 4).map_or(0, |b| {
                u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            })
        };
        let mut out = vec![0u8; size as usize];
        let (src, row) = match part {
            Part::Ids => {
                for i in 0..self.rows {
                    let renumbered = if id(i) < self.vocab { i } else { self.rows };
                    let at = (i * 4) as usize;
                    out[at..at + 4].copy_from_slice(&(renumbered as u32).to_le_bytes());
                }
                return out;
            }
            Part::Table => (copy(self.table), self.row_bytes),
            Part::Scales => (self.scales.map_or(&empty, copy), self.scale_row_bytes),
        };
        for i in 0..self.rows {
            let r = id(i);
            if r >= self.vocab {
                continue; // renumbered past the gathered table: the kernel writes zeros
            }
            let (from, to) = ((r * row) as usize, (i * row) as usize);
            if let (Some(s), Some(d)) = (
                src.get(from..from + row as usize),
                out.get_mut(to..to + row as usize),
            ) {
                d.copy_from_slice(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
