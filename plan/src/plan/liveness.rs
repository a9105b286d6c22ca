//! Liveness analysis: from an ordered list of ops to planner buffers.
//!
//! An intermediate tensor lives from the first op that writes it to the last op that uses it,
//! inclusive, i.e. the half-open op-index interval `[first_write, last_use + 1)`; inputs and outputs
//! of one op are live together. Graph inputs, outputs and persistent tensors are owned by the caller
//! and not planned. An in-place hint lets an op's output take over the buffer of an input that dies
//! at that op (its last use) when the output fits in that buffer; the buffer's lifetime then covers
//! both tensors.

use super::Buffer;
use crate::{ArgumentError, Error, Result};

/// What a tensor is to the planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// Produced and consumed inside the graph: planned.
    Intermediate,
    /// A graph input, valid before the first op: not planned.
    Input,
    /// A graph output, read after the last op: not planned.
    Output,
    /// Weights and other state that outlive the graph: not planned.
    Persistent,
}

/// The tensors one op touches (indices into the tensor list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpUses {
    /// Tensors the op reads.
    pub reads: Vec<usize>,
    /// Tensors the op writes.
    pub writes: Vec<usize>,
    /// `(written, read)`: the op may write `written` over `read` when `read` dies at this op.
    pub in_place: Option<(usize, usize)>,
}

/// The result of [`liveness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    /// Per tensor: the half-open op-index lifetime `[first_write, last_use + 1)` of intermediate
    /// tensors that some op uses; `None` for the rest.
    pub lifetimes: Vec<Option<(u64, u64)>>,
    /// Per tensor: the planner buffer that holds it (tensors sharing a buffer via in-place hints
    /// sit at the same offset); `None` for tensors that are not planned.
    pub buffer_of: Vec<Option<usize>>,
    /// The buffers to plan (feed them to [`super::solve`]).
    pub buffers: Vec<Buffer>,
}

/// Computes lifetimes and planner buffers. `sizes` are in bytes, `align` applies to every buffer.
///
/// # Errors
/// [`Error::SizeMismatch`] when `roles` and `sizes` differ in length; [`Error::InvalidAlignment`];
/// [`ArgumentError`] naming the op and tensor: [`OutOfRange`](ArgumentError::OutOfRange) for an
/// index out of range, [`ReadBeforeWrite`](ArgumentError::ReadBeforeWrite) for a tensor read before
/// any op writes it (inputs and persistent tensors excepted),
/// [`WritesInput`](ArgumentError::WritesInput) for a write to a graph input,
/// [`Zero`](ArgumentError::Zero) for an intermediate of size 0, [`Invalid`](ArgumentError::Invalid)
/// for an in-place hint whose tensors the op does not write / read.
pub fn liveness(
    roles: &[TensorRole],
    sizes: &[u64],
    ops: &[OpUses],
    align: u64,
) -> Result<Liveness> {
    if roles.len() != sizes.len() {
        return Err(Error::SizeMismatch {
            what: "tensor sizes (one per role)".into(),
            expected: roles.len() as u64,
            actual: sizes.len() as u64,
        });
    }
    if !align.is_power_of_two() || align > 1 << 62 {
        return Err(Error::InvalidAlignment {
            align,
            max: 1 << 62,
        });
    }
    let n = roles.len();
    let mut first_write: Vec<Option<u64>> = vec![None; n];
    let mut last_use: Vec<u64> = vec![0; n];
    for (k, op) in ops.iter().enumerate() {
        let k64 = k as u64;
        for &t in op.reads.iter().chain(&op.writes) {
            if t >= n {
                let what = format!("op {k}: tensor");
                return Err(ArgumentError::out_of_range(what, t as u64, n as u64).into());
            }
        }
        for &t in &op.reads {
            let produced = matches!(roles[t], TensorRole::Input | TensorRole::Persistent)
                || first_write[t].is_some();
            if !produced {
                return Err(ArgumentError::ReadBeforeWrite {
                    tensor: t.to_string(),
                    reader: format!("op {k}"),
                }
                .into());
            }
            last_use[t] = k64;
        }
        for &t in &op.writes {
            if roles[t] == TensorRole::Input {
                return Err(ArgumentError::WritesInput {
                    tensor: t.to_string(),
                    writer: format!("op {k}"),
                }
                .into());
            }
            if first_write[t].is_none() {
                first_write[t] = Some(k64);
            }
            last_use[t] = k64;
        }
        if let Some((w, r)) = op.in_place
            && (!op.writes.contains(&w) || !op.reads.contains(&r))
        {
            return Err(ArgumentError::invalid_value(
                format!("in-place hint of op {k}"),
                format!("{w} over {r}"),
                format!("{w} among the op's writes and {r} among its reads"),
            )
            .into());
        }
    }
    let mut lifetimes = vec![None; n];
    for t in 0..n {
        if roles[t] != TensorRole::Intermediate {
            continue;
        }
        if let Some(f) = first_write[t] {
            if sizes[t] == 0 {
                return Err(ArgumentError::zero(format!("size of intermediate tensor {t}")).into());
            }
            lifetimes[t] = Some((f, last_use[t] + 1));
        }
    }
    // Assign buffers in op order so that an in-place output finds its input's buffer assigned.
    let mut buffer_of: Vec<Option<usize>> = vec![None; n];
    let mut buffers: Vec<Buffer> = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        let k64 = k as u64;
        for &t in &op.writes {
            let Some((lower, upper)) = lifetimes[t] else {
                continue;
            };
            if lower != k64 || buffer_of[t].is_some() {
                continue;
            }
            let shared = op.in_place.and_then(|(w, r)| {
                let b = buffer_of[r]?;
                let dies_here = lifetimes[r].is_some_and(|(_, u)| u == k64 + 1);
                // The read tensor must be the buffer's last occupant so far, so nothing else lives in it.
                (w == t && dies_here && buffers[b].upper == k64 + 1 && sizes[t] <= buffers[b].size)
                    .then_some(b)
            });
            match shared {
                Some(b) => {
                    buffers[b].upper = buffers[b].upper.max(upper);
                    buffer_of[t] = Some(b);
                }
                None => {
                    buffer_of[t] = Some(buffers.len());
                    buffers.push(Buffer {
                        lower,
                        upper,
                        size: sizes[t],
                        align,
                    });
                }
            }
        }
    }
    Ok(Liveness {
        lifetimes,
        buffer_of,
        buffers,
    })
}

#[cfg(test)]
mod tests;
