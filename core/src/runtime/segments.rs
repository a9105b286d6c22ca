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

use super::Runtime;
use crate::backend::{BlockId, BlockRange, Capabilities, Ticket, Waiting};
use crate::ops::{DType, Op};
use crate::pool::{Allocation, DevicePool, Lease};
use crate::validate::split::{gcd, lcm};
use crate::{Error, Result};

/// Most segments one tensor may have: with WebGPU's 256 MiB blocks, 256 TiB. A segment list is
/// built in proportion to the count, so a count beyond any device is refused before it is built.
pub(crate) const MAX_SEGMENTS: u64 = 1 << 20;

/// The number of segments of `segment` bytes for `size` bytes, refused as [`Error::TooLarge`]
/// when the tensor exceeds the device's memory (`caps.budget`, where the backend reports one)
/// or [`MAX_SEGMENTS`]: checked before any list of segments is built.
pub(crate) fn segment_count(caps: &Capabilities, size: u64, segment: u64) -> Result<u64> {
    if let Some(limit) = caps.budget.filter(|&l| size > l) {
        return Err(Error::TooLarge {
            what: "tensor (in segments)",
            requested: size,
            limit,
            limit_name: "device memory",
        });
    }
    let count = size.div_ceil(segment);
    if count > MAX_SEGMENTS {
        return Err(Error::TooLarge {
            what: "tensor (in segments)",
            requested: size,
            limit: MAX_SEGMENTS.saturating_mul(segment),
            limit_name: "segments per tensor",
        });
    }
    Ok(count)
}

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
    // Whole 32-bit words too: the last segment's binding is rounded up to one.
    let align = lcm(caps.binding_align.max(1), caps.copy_align.max(1))
        .and_then(|a| lcm(a, 4))
        .ok_or_else(too_large)?;
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

/// Where a tensor's bytes are: one allocation, or segments each in one block, in byte order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segments {
    /// Never empty.
    allocs: Vec<Allocation>,
    /// Bytes of the tensor in every segment but the last (all of them with one segment).
    segment_size: u64,
}

impl Segments {
    /// All `size` bytes in one allocation.
    pub(crate) fn one(alloc: Allocation, size: u64) -> Self {
        Segments {
            allocs: vec![alloc],
            segment_size: size,
        }
    }

    /// The allocations, in byte order.
    pub(crate) fn allocs(&self) -> &[Allocation] {
        &self.allocs
    }

    /// The allocation holding the first byte.
    pub(crate) fn first(&self) -> Allocation {
        self.allocs[0]
    }

    /// Each segment of a tensor of `size` bytes with the range of its bytes it holds:
    /// `(allocation, offset, size)`.
    pub(crate) fn pieces(&self, size: u64) -> impl Iterator<Item = (Allocation, u64, u64)> + '_ {
        let last = self.allocs.len() - 1;
        self.allocs.iter().enumerate().map(move |(i, &a)| {
            let offset = i as u64 * self.segment_size;
            let len = if i == last {
                size - offset
            } else {
                self.segment_size
            };
            (a, offset, len)
        })
    }
}

/// The sizes of the segments of a `dtype` tensor of `shape` and `size` bytes on `caps`: one
/// entry when it fits in a block.
///
/// # Errors
/// As [`segment_size`] and [`segment_count`].
pub(crate) fn segment_sizes(
    caps: &Capabilities,
    dtype: DType,
    shape: &[usize],
    size: u64,
) -> Result<Vec<u64>> {
    if size.next_multiple_of(4) <= caps.max_block_size {
        return Ok(vec![size]);
    }
    let segment = segment_size(caps, dtype, shape, size)?;
    let count = segment_count(caps, size, segment)?;
    Ok((0..count)
        .map(|i| segment.min(size - i * segment))
        .collect())
}

/// Checks at compile time that `op` can run over its operands (dtype, shape and byte size each,
/// in binding order) as the runtime would hold them on `caps`: the front's cut over segmented
/// operands, tried on stand-in ranges.
///
/// # Errors
/// [`Error::SegmentedOperand`], [`Error::TooLarge`] as a dispatch of the op would return.
pub(crate) fn check_cuttable(
    caps: &Capabilities,
    op: &Op,
    operands: &[(DType, &[usize], u64)],
) -> Result<()> {
    let mut layouts = Vec::with_capacity(operands.len());
    for &(dtype, shape, size) in operands {
        let sizes = segment_sizes(caps, dtype, shape, size)?;
        layouts.push(
            sizes
                .into_iter()
                .enumerate()
                .map(|(i, size)| BlockRange {
                    block: BlockId(i as u64),
                    offset: 0,
                    size: size.next_multiple_of(4),
                })
                .collect::<Vec<_>>(),
        );
    }
    if layouts.iter().all(|l| l.len() == 1) {
        return Ok(());
    }
    let ranges: Vec<&[BlockRange]> = layouts.iter().map(Vec::as_slice).collect();
    crate::validate::split::split_segments(op, &ranges, caps.max_binding_size, caps.binding_align)
        .map(|_| ())
}

impl Runtime {
    /// Allocates a `dtype` tensor of `shape` and `size` bytes (rounded to whole 32-bit words) at
    /// `align`: one allocation when it fits in a block, else segments of
    /// [`segment_size`] bytes. Transactional: a segment that cannot be allocated (out of memory,
    /// budget) frees the ones before it and reports the error.
    pub(crate) fn alloc_segments(
        &self,
        dtype: DType,
        shape: &[usize],
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Segments> {
        let pool = self.device_pool();
        // Whole 32-bit words, so a packed f16 / int8 tensor of odd length can be bound.
        let words = size
            .checked_next_multiple_of(4)
            .ok_or_else(|| Error::ArithmeticOverflow {
                what: format!("byte size of a {} tensor of shape {shape:?}", dtype.name()),
                limit_name: "u64",
            })?;
        let caps = self.backend().capabilities();
        if words <= caps.max_block_size {
            let a = pool.allocate(words, align, label)?;
            // The runtime keeps handles, not the range `allocate` leased: every use resolves.
            if let Err(e) = pool.release(a.handle) {
                let _ = pool.free(a.handle);
                return Err(e);
            }
            return Ok(Segments::one(a, size));
        }
        // Segments that together exceed the device's memory can never all be held: refused as
        // hopeless up front, not as a retryable out of memory at some later segment.
        if let Some(limit) = self.budget().limit().filter(|&l| words > l) {
            return Err(Error::TooLarge {
                what: "tensor (in segments)",
                requested: size,
                limit,
                limit_name: "device memory budget",
            });
        }
        let segment = segment_size(caps, dtype, shape, size)?;
        let count = segment_count(caps, words, segment)?;
        let mut allocs: Vec<Allocation> = Vec::with_capacity(count as usize);
        for i in 0..count {
            let bytes = segment.min(words - i * segment);
            let label = format!("{label} [segment {} of {count}]", i + 1);
            match pool
                .allocate(bytes, align, &label)
                .and_then(|a| pool.release(a.handle).map(|()| a))
            {
                Ok(a) => allocs.push(a),
                Err(e) => {
                    for a in allocs {
                        let _ = pool.free(a.handle);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Segments {
            allocs,
            segment_size: segment,
        })
    }

    /// Frees every segment, once the work queued on it (up to `after`) completes: the memory of
    /// a tensor or weight whose filling failed.
    pub(crate) fn discard_segments(&self, segments: &Segments, after: Ticket) {
        let pool = self.device_pool();
        for a in segments.allocs() {
            let _ = pool.free_after(a.handle, after);
        }
    }

    /// Writes `data` at byte `offset` of a tensor of `size` bytes held in `segments`, segment by
    /// segment (each piece through the one write path). Returns the latest ticket.
    pub(crate) async fn write_segments(
        &self,
        waiting: Waiting,
        segments: &Segments,
        size: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<Ticket> {
        let end = offset + data.len() as u64;
        let mut last = Ticket::DONE;
        for (alloc, start, len) in segments.pieces(size) {
            let (from, to) = (offset.max(start), end.min(start + len));
            if from < to {
                let piece = &data[(from - offset) as usize..(to - offset) as usize];
                last = last.max(
                    self.write_bytes_with(waiting, alloc, from - start, piece)
                        .await?,
                );
            }
        }
        Ok(last)
    }

    /// Reads `out.len()` bytes at byte `offset` of a tensor of `size` bytes held in `segments`.
    pub(crate) async fn read_segments(
        &self,
        waiting: Waiting,
        segments: &Segments,
        size: u64,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let end = offset + out.len() as u64;
        for (alloc, start, len) in segments.pieces(size) {
            let (from, to) = (offset.max(start), end.min(start + len));
            if from < to {
                let piece = &mut out[(from - offset) as usize..(to - offset) as usize];
                self.read_bytes_with(waiting, alloc, from - start, piece)
                    .await?;
            }
        }
        Ok(())
    }
}

/// The bindings of a tensor of `size` bytes held in `segments`, each segment's bytes rounded to
/// whole 32-bit words (an f16 or int8 tensor of odd length binds its padding too). Each segment
/// stays leased (pushed to `leases`) until the caller drops the lease after recording its use.
///
/// # Errors
/// [`Error::StaleHandle`] for a freed segment.
pub(crate) fn segment_ranges<'p>(
    pool: &'p dyn DevicePool,
    segments: &Segments,
    size: u64,
    leases: &mut Vec<Lease<'p>>,
) -> Result<Vec<BlockRange>> {
    segments
        .pieces(size)
        .map(|(a, _, len)| {
            let (range, lease) = Lease::resolve(pool, a.handle)?;
            leases.push(lease);
            Ok(BlockRange {
                size: len.next_multiple_of(4),
                ..range
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
