//! The segments behind a [`KvCache`](super::KvCache): device tensors of whole blocks at a fixed
//! stride, read and written in runs of adjacent blocks (one transfer per run).
//!
//! Where the device pool offers tensors that grow in place ([`Runtime::alloc_expandable`]: the
//! host's reserve-and-commit, CUDA's virtual memory, Vulkan's sparse binding), a segment is
//! reserved for as many blocks as the budget allows (up to the device's largest block and one
//! reservation) and committed as the cache grows, by steps of an eighth of what it holds (at
//! least [`MIN_EXPANSION_BYTES`]): a cache within one reservation is one segment, so kernels
//! dispatch once, and its memory follows the blocks in use instead of jumping by segments.
//! Elsewhere the cache grows one segment at a time up to the budget (segments of 1/8 of the
//! budget, at least 64 MiB, at most the device's largest block). Either way every segment but
//! the last holds `per_segment` blocks, so block `b` is block `b % per_segment` of segment
//! `b / per_segment`.

use crate::kv::{KvError, KvGeometry};
use crate::runtime::{Runtime, Tensor};
use crate::{Backend, DType, Result};

/// Segments stop growing at this many; a segment holds at least `1/TARGET_SEGMENTS` of the
/// budget's blocks unless the device's largest block is smaller.
const TARGET_SEGMENTS: usize = 8;

/// A segment holds at least this many bytes of blocks (or the whole budget, or the device's
/// largest block, if smaller): kernels dispatch once per segment a batch's blocks are in, so a
/// small cache is one segment, and a large one grows in steps of 1/8 of its budget.
const MIN_SEGMENT_BYTES: u64 = 64 << 20;

/// An expandable segment grows by at least this many bytes of blocks (CUDA's mapping
/// granularity), else by an eighth of what it holds.
pub const MIN_EXPANSION_BYTES: u64 = 2 << 20;

pub(super) struct Segments {
    tensors: Vec<Tensor>,
    per_segment: usize,
    stride: u64,
    #[cfg(not(target_arch = "wasm32"))]
    block_bytes: u64,
    max_blocks: usize,
    blocks: usize,
    /// Whether segments are tried as expandable tensors (cleared when the pool refuses one).
    expandable: bool,
}

impl Segments {
    /// The segment plan for `budget` bytes of `geometry` blocks on `rt`.
    pub(super) fn plan(rt: &Runtime, g: &KvGeometry, budget: u64) -> Result<Self> {
        let caps = rt.front().capabilities();
        let stride = g.block_stride(caps.binding_align.max(caps.copy_align));
        if stride > caps.max_block_size {
            return Err(KvError::Geometry(format!(
                "a block of {stride} bytes is larger than the device's largest block ({} bytes): \
                 use fewer tokens per block",
                caps.max_block_size
            ))
            .into());
        }
        let max_blocks = usize::try_from(budget / stride).unwrap_or(usize::MAX);
        if max_blocks == 0 {
            return Err(KvError::BudgetBelowBlock {
                budget,
                block_bytes: stride,
            }
            .into());
        }
        let by_device = usize::try_from(caps.max_block_size / stride).unwrap_or(usize::MAX);
        let at_least = usize::try_from(MIN_SEGMENT_BYTES.div_ceil(stride)).unwrap_or(usize::MAX);
        // One reservation's worth of blocks, where the pool grows tensors in place.
        let by_reservation = rt
            .device_pool()
            .expandable()
            .and(rt.backend().growable())
            .map(|g| g.in_place_growth())
            .map(|g| (g.max_reserve.min(caps.max_block_size) & !(g.granularity - 1)) / stride)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0);
        let expandable = by_reservation.is_some();
        let per_segment = match by_reservation {
            Some(n) => max_blocks.min(by_device).min(n),
            None => max_blocks
                .div_ceil(TARGET_SEGMENTS)
                .max(at_least)
                .min(max_blocks)
                .min(by_device),
        }
        .max(1);
        Ok(Segments {
            tensors: Vec::new(),
            per_segment,
            stride,
            #[cfg(not(target_arch = "wasm32"))]
            block_bytes: g.block_bytes(),
            max_blocks,
            blocks: 0,
            expandable,
        })
    }

    /// Grows the last segment in place or adds one; the blocks added, or `None` at the budget.
    pub(super) fn grow(&mut self, rt: &Runtime) -> Result<Option<usize>> {
        let room = self.max_blocks - self.blocks;
        if room == 0 {
            return Ok(None);
        }
        let step = |held: usize| {
            let least = usize::try_from(MIN_EXPANSION_BYTES.div_ceil(self.stride)).unwrap_or(1);
            (held / 8).max(least).max(1)
        };
        // Only the last segment may be shorter: earlier ones are full, so `b / per_segment`
        // finds any block's segment.
        let full = self.tensors.len() * self.per_segment;
        let stride = self.stride as usize;
        if let Some(last) = self.tensors.last_mut().filter(|_| self.blocks < full) {
            let held = last.size() as usize / stride;
            let n = step(held).min(self.per_segment - held).min(room);
            rt.expand(last, &[(held + n) * stride])?;
            self.blocks += n;
            return Ok(Some(n));
        }
        let reserve = (self.per_segment.min(room) * stride) as u64;
        if self.expandable {
            let n = step(0).min(self.per_segment).min(room);
            let label = "kv cache segment (expandable)";
            match rt.alloc_expandable(DType::U8, &[n * stride], reserve, label)? {
                Some(t) => {
                    self.tensors.push(t);
                    self.blocks += n;
                    return Ok(Some(n));
                }
                None => self.expandable = false,
            }
        }
        let n = self.per_segment.min(room);
        let t = rt.alloc(DType::U8, &[n * stride], "kv cache segment")?;
        self.tensors.push(t);
        self.blocks += n;
        Ok(Some(n))
    }

    pub(super) fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    pub(super) fn blocks_per_segment(&self) -> usize {
        self.per_segment
    }

    pub(super) fn stride(&self) -> u64 {
        self.stride
    }

    pub(super) fn device_bytes(&self) -> u64 {
        self.tensors.iter().map(Tensor::size).sum()
    }

    /// Whether block `b` directly follows block `a` in one segment.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn adjacent(&self, a: u32, b: u32) -> bool {
        a.checked_add(1) == Some(b) && !(b as usize).is_multiple_of(self.per_segment)
    }

    /// Block `b`'s segment and its offset there.
    pub(super) fn locate(&self, b: u32) -> Result<(&Tensor, u64)> {
        let b = b as usize;
        let t = self
            .tensors
            .get(b / self.per_segment)
            .filter(|_| b < self.blocks)
            .ok_or_else(|| {
                crate::Error::invariant(
                    "kv block in a segment",
                    format!("block {b} of {}", self.blocks),
                )
            })?;
        Ok((t, (b % self.per_segment) as u64 * self.stride))
    }

    /// Runs of blocks adjacent in one segment: (first index in `blocks`, run length).
    #[cfg(not(target_arch = "wasm32"))]
    fn runs(&self, blocks: &[u32]) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, &b) in blocks.iter().enumerate() {
            match runs.last_mut() {
                Some((start, len)) if self.adjacent(blocks[*start + *len - 1], b) => *len += 1,
                _ => runs.push((i, 1)),
            }
        }
        runs
    }

    /// The bytes of `blocks`, `block_bytes` each, in order.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn read_blocks(&self, rt: &Runtime, blocks: &[u32]) -> Result<Vec<u8>> {
        let (bb, stride) = (self.block_bytes as usize, self.stride as usize);
        let mut out = vec![0u8; blocks.len() * bb];
        let mut run_buf = Vec::new();
        for (start, len) in self.runs(blocks) {
            let (t, offset) = self.locate(blocks[start])?;
            if stride == bb {
                rt.read_bytes(
                    t.allocation(),
                    offset,
                    &mut out[start * bb..(start + len) * bb],
                )?;
                continue;
            }
            run_buf.resize(len * stride, 0);
            rt.read_bytes(t.allocation(), offset, &mut run_buf)?;
            for i in 0..len {
                out[(start + i) * bb..][..bb].copy_from_slice(&run_buf[i * stride..][..bb]);
            }
        }
        Ok(out)
    }

    /// Writes `bytes` (`block_bytes` per block) into `blocks`.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn write_blocks(&self, rt: &Runtime, blocks: &[u32], bytes: &[u8]) -> Result<()> {
        let (bb, stride) = (self.block_bytes as usize, self.stride as usize);
        let mut run_buf = Vec::new();
        for (start, len) in self.runs(blocks) {
            let (t, offset) = self.locate(blocks[start])?;
            let src = &bytes[start * bb..(start + len) * bb];
            if stride == bb {
                rt.write_bytes(t.allocation(), offset, src)?;
                continue;
            }
            run_buf.clear();
            run_buf.resize(len * stride, 0);
            for i in 0..len {
                run_buf[i * stride..][..bb].copy_from_slice(&src[i * bb..][..bb]);
            }
            rt.write_bytes(t.allocation(), offset, &run_buf)?;
        }
        Ok(())
    }

    /// Copies block `src` to block `dst` on the device.
    pub(super) fn copy_block(&self, rt: &Runtime, src: u32, dst: u32) -> Result<()> {
        let pool = rt.device_pool();
        let (ts, os) = self.locate(src)?;
        let (td, od) = self.locate(dst)?;
        let (s, _src_lease) = rt.sub_range(
            pool.as_ref(),
            ts.allocation(),
            os,
            self.stride,
            "kv copy source",
        )?;
        let (d, _dst_lease) = rt.sub_range(
            pool.as_ref(),
            td.allocation(),
            od,
            self.stride,
            "kv copy destination",
        )?;
        let front: &dyn Backend = rt.front();
        let ticket = front.copy(s, d)?;
        pool.mark_used(ts.allocation().handle, ticket)?;
        pool.mark_used(td.allocation().handle, ticket)?;
        Ok(())
    }

    /// Frees every segment; the cache holds no blocks after.
    pub(super) fn release(&mut self, rt: &Runtime) -> Result<()> {
        let mut result = Ok(());
        self.blocks = 0;
        for t in std::mem::take(&mut self.tensors) {
            result = result.and(rt.free(t));
        }
        result
    }
}
