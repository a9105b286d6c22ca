//! The host-access paths and argument checks behind `impl Backend for WgpuBackend`: mapping a
//! block for the host (waiting natively, already mapped in a browser), reads emulated through a
//! temporary block, and the range and usage checks every method runs before touching wgpu.

use std::sync::MutexGuard;

use tensormem_contract::{BlockId, BlockRange, Error, Result};

use crate::blocks::mapping;
use crate::blocks::{Block, MapState};
#[cfg(not(target_arch = "wasm32"))]
use crate::conv::align_up;
use crate::error::lock;
#[cfg(not(target_arch = "wasm32"))]
use crate::error::poll_wait;
use crate::{State, WgpuBackend};

/// Checks that `value` (an offset or size named `what`) is a multiple of `align`.
pub(super) fn check_aligned(value: u64, align: u64, what: &'static str) -> Result<()> {
    if !value.is_multiple_of(align) {
        return Err(Error::Misaligned {
            what,
            value,
            align,
            align_name: "wgpu::COPY_BUFFER_ALIGNMENT",
        });
    }
    Ok(())
}

impl WgpuBackend {
    /// Submits the open batch if `block` is used by it, so a mapping can complete, and returns
    /// the submission index of the block's last use while it may still be in flight.
    pub(crate) fn prepare_host_access(
        &self,
        state: &mut State,
        id: BlockId,
    ) -> Result<Option<wgpu::SubmissionIndex>> {
        let last_use = state.blocks.get(id)?.last_use;
        if last_use >= state.timeline.open() {
            state.timeline.submit(&self.queue);
        }
        Ok(state.timeline.submission(last_use))
    }

    /// Submits the open batch and blocks until it (and everything before it) finished.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn submit_and_wait(&self, state: &mut State) -> Result<()> {
        let ticket = state.timeline.submit(&self.queue);
        if let Some(index) = state.timeline.submission(ticket) {
            poll_wait(&self.device, Some(index), self.config.wait_timeout, || {
                format!("ticket {ticket}")
            })?;
            state.timeline.mark_completed(ticket);
        }
        self.health.check()
    }

    /// Reads an `Upload` block (not mappable for reading in WebGPU) through a temporary
    /// readback buffer: copy, submit, wait, map. Native only: it blocks.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn read_emulated(
        &self,
        state: &mut State,
        id: BlockId,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let lo = crate::conv::align_down(offset, wgpu::COPY_BUFFER_ALIGNMENT);
        let end = offset + out.len() as u64;
        let hi = align_up(end, wgpu::COPY_BUFFER_ALIGNMENT).ok_or_else(|| {
            Error::ArithmeticOverflow {
                what: format!("wgpu: read range end {end} rounded up to the copy alignment"),
                limit_name: "u64",
            }
        })?;
        let block = state.blocks.get_mut(id)?;
        block.unmap();
        let src = block.buffer.clone();
        let tmp = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensormem emulated read"),
            size: hi - lo,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        state
            .timeline
            .encoder(&self.device)
            .copy_buffer_to_buffer(&src, lo, &tmp, 0, hi - lo);
        let ticket = state.timeline.enqueued();
        state.blocks.get_mut(id)?.last_use = ticket;
        self.submit_and_wait(state)?;
        let mut tmp_block = Block {
            buffer: tmp,
            kind: tensormem_contract::MemoryKind::Readback,
            size: hi - lo,
            map: MapState::Unmapped,
            last_use: 0,
            pending: None,
        };
        mapping::ensure_mapped(
            &self.device,
            &mut tmp_block,
            MapState::Read,
            None,
            self.config.wait_timeout,
        )?;
        mapping::read(&tmp_block, offset - lo, out)
    }

    /// Maps `block` for `state` before host access: natively waiting as needed; in a browser the
    /// block must already be mapped (by an awaited `poll_host_access`).
    pub(super) fn map_for_host(
        &self,
        state: &mut State,
        block: BlockId,
        map: MapState,
    ) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let last_use = self.prepare_host_access(state, block)?;
            mapping::ensure_mapped(
                &self.device,
                state.blocks.get_mut(block)?,
                map,
                last_use,
                self.config.wait_timeout,
            )
        }
        #[cfg(target_arch = "wasm32")]
        mapping::ensure_mapped(state.blocks.get_mut(block)?, map)
    }

    /// The state, locked, for a mapped access (`what` names the call) of `len` bytes at `offset`
    /// of `block`, once the device is healthy, the block known and host-visible and the range
    /// inside it; `None` for an empty access, which has nothing to do.
    pub(super) fn lock_mapped(
        &self,
        block: BlockId,
        offset: u64,
        len: usize,
        what: &'static str,
    ) -> Result<Option<MutexGuard<'_, State>>> {
        self.health.check()?;
        let state = lock(&self.state);
        let b = state.blocks.get(block)?;
        b.check_range(offset, len as u64, "block")?;
        if !b.mappable() {
            return Err(mapping::not_host_visible(b, what));
        }
        Ok((len > 0).then_some(state))
    }

    /// Checks a device-side range: known block, in bounds, 4-byte aligned, non-empty.
    pub(super) fn check_device_range(
        state: &State,
        range: BlockRange,
        what: &'static str,
    ) -> Result<()> {
        if range.size == 0 {
            return Err(Error::ZeroSize { what });
        }
        let block = state.blocks.get(range.block)?;
        block.check_range(range.offset, range.size, what)?;
        check_aligned(range.offset, wgpu::COPY_BUFFER_ALIGNMENT, "offset")?;
        check_aligned(range.size, wgpu::COPY_BUFFER_ALIGNMENT, "size")
    }

    /// Checks that block `id` has `usage` for the role `role`.
    pub(super) fn check_usage(
        block: &Block,
        id: BlockId,
        usage: wgpu::BufferUsages,
        role: &'static str,
    ) -> Result<()> {
        if !block.buffer.usage().contains(usage) {
            let allowed = if usage == wgpu::BufferUsages::COPY_SRC {
                "DeviceLocal or Upload"
            } else if usage == wgpu::BufferUsages::COPY_DST {
                "DeviceLocal or Readback"
            } else {
                "DeviceLocal"
            };
            return Err(Error::WrongMemoryKind {
                role,
                block: id.0,
                kind: block.kind.name(),
                allowed,
            });
        }
        Ok(())
    }
}
