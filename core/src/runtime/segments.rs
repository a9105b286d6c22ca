//! Tensors larger than one block, held in segments across blocks (issue 13: WebGPU's
//! `max_buffer_size` is 256 MiB by default, and a model's embedding table or activations can be
//! larger).
//!
//! **Why segmentation lives in the runtime's tensor, not in the pools.** A pool hands out one
//! contiguous range per handle, and everything above it relies on that: `resolve` returns one
//! [`BlockRange`](crate::BlockRange), adaptors (budget, guards, zero-on-reuse, tracing, replay,
//! spill) account and check one range per handle, and the planner places one interval per
//! tensor. A multi-range allocation would change every pool and adaptor for the one caller that
//! needs it. The tensor instead holds a list of ordinary allocations, each an independent,
//! budgeted, traced, deferred-free allocation of the pool stack; only the tensor-level calls
//! (transfers, dispatch, free, prefetch, copies between devices) walk the list, and the validating
//! front cuts an op over segmented operands into parts that each bind within one segment
//! ([`Validated::dispatch_segments`](crate::Validated::dispatch_segments)).
//!
//! **Where the cuts fall.** Between slices of the outermost axis (rows of a matrix, images of a
//! batch): the axis along which the front splits ops. Every segment but the last holds the same
//! number of slices, a multiple of `binding_align / element size`, so that any part boundary of
//! an op (another operand's segment boundary, counted in the op's units) lands on the binding
//! alignment inside this tensor's segments too. A tensor whose slices are too large for that is
//! cut between elements instead: transfers still work, and ops that split it element-wise too.

use super::{Runtime, Tensor};
use crate::backend::{Capabilities, Ticket};
use crate::ops::DType;
use crate::pool::Allocation;
use crate::validate::split::{gcd, lcm};
use crate::{Error, Result};

/// Bytes of every segment but the last for a `dtype` tensor of `shape` (of `size` bytes, larger
/// than `caps.max_block_size`): the most that fits in one block and ends between outermost slices
/// (or elements) at a step that keeps op parts aligned (module doc).
///
/// # Errors
/// [`Error::TooLarge`] when not even one aligned run of elements fits in a block.
pub(crate) fn segment_size(
    caps: &Capabilities,
    dtype: DType,
    shape: &[usize],
    size: u64,
) -> Result<u64> {
    let elem = dtype.size();
    let too_large = || Error::TooLarge {
        what: "tensor segment (one aligned run of elements)",
        requested: size,
        limit: caps.max_block_size,
        limit_name: "max_block_size",
    };
    let align = lcm(caps.binding_align.max(1), caps.copy_align.max(1)).ok_or_else(too_large)?;
    let per_cut = align / gcd(elem, align);
    let slice = shape
        .iter()
        .skip(1)
        .try_fold(elem, |n, &d| n.checked_mul(d as u64));
    let max = caps.max_block_size;
    let fits = |unit: Option<u64>| unit.filter(|&u| u > 0 && u <= max).map(|u| max / u * u);
    fits(slice.and_then(|s| s.checked_mul(per_cut)))
        .or_else(|| fits(elem.checked_mul(per_cut)))
        .ok_or_else(too_large)
}

impl Runtime {
    /// Allocates a tensor of `size` bytes (`words` rounded to whole 32-bit words) larger than one
    /// block as segments of [`segment_size`] bytes. Transactional: a segment that cannot be
    /// allocated (out of memory, budget) frees the ones before it and reports the error.
    pub(super) fn alloc_segments(
        &self,
        dtype: DType,
        shape: &[usize],
        size: u64,
        words: u64,
        label: &str,
    ) -> Result<Tensor> {
        let caps = self.backend().capabilities();
        let segment = segment_size(caps, dtype, shape, size)?;
        let count = words.div_ceil(segment);
        let pool = self.device_pool();
        let mut segments: Vec<Allocation> = Vec::with_capacity(count as usize);
        for i in 0..count {
            let bytes = segment.min(words - i * segment);
            let label = format!("{label} [segment {} of {count}]", i + 1);
            match pool.allocate(bytes, 1, &label) {
                Ok(a) => segments.push(a),
                Err(e) => {
                    for a in segments {
                        let _ = pool.free(a.handle);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Tensor::segmented(
            segments,
            segment,
            self.device_id(),
            dtype,
            shape.to_vec(),
            size,
        ))
    }

    /// Frees every segment of a tensor whose filling failed, once the work queued on it (up to
    /// `after`) completes.
    pub(crate) fn discard(&self, tensor: Tensor, after: Ticket) {
        let pool = self.device_pool();
        for a in tensor.segments() {
            let _ = pool.free_after(a.handle, after);
        }
    }
}
