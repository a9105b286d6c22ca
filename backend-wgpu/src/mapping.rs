//! Synchronous host access to mappable blocks over wgpu's asynchronous mapping.
//!
//! wgpu maps with `map_async` + a callback that fires during `Device::poll`. [`ensure_mapped`]
//! maps the *whole* buffer in the needed mode and polls until the callback has fired: first a
//! non-blocking poll (the usual case: the buffer is idle), then a blocking wait for the
//! submission that last used the block. The mapping is kept afterwards, so a run of writes into
//! an upload block costs one map; any device use unmaps it again (`Block::unmap`).
//!
//! Views must start at a multiple of `MAP_ALIGNMENT` (8) and span a multiple of 4 bytes, while
//! the contract only promises 4-aligned offsets: [`write`] and [`read`] widen the view to the
//! enclosing aligned range and copy the requested bytes inside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tensormem::{Error, Result};

use crate::blocks::{Block, MapState};
use crate::conv::{align_down, align_up};
use crate::error::{BACKEND, map_mapping_error, map_poll_error};

/// Callback outcome: still pending.
const PENDING: u8 = 0;
/// Callback outcome: mapped.
const MAPPED: u8 = 1;
/// Callback outcome: the mapping failed.
const FAILED: u8 = 2;

/// Maps `block` in `state` (`Read` or `Write`), remapping when it is mapped the other way.
///
/// `last_use` is the submission that last used the block, if it may still be in flight: the
/// mapping completes only after it, so that is what a blocking poll waits for.
///
/// # Errors
/// [`Error::Backend`] when wgpu refuses the mapping or the wait times out.
pub(crate) fn ensure_mapped(
    device: &wgpu::Device,
    block: &mut Block,
    state: MapState,
    last_use: Option<wgpu::SubmissionIndex>,
    timeout: Option<Duration>,
) -> Result<()> {
    debug_assert!(state != MapState::Unmapped);
    if block.map == state {
        return Ok(());
    }
    block.unmap();
    let mode = match state {
        MapState::Write => wgpu::MapMode::Write,
        _ => wgpu::MapMode::Read,
    };
    let outcome = Arc::new(AtomicU8::new(PENDING));
    let signal = Arc::clone(&outcome);
    block.buffer.map_async(mode, .., move |result| {
        signal.store(
            if result.is_ok() { MAPPED } else { FAILED },
            Ordering::Release,
        );
    });
    device.poll(wgpu::PollType::Poll).map_err(map_poll_error)?;
    if outcome.load(Ordering::Acquire) == PENDING {
        device
            .poll(wgpu::PollType::Wait {
                submission_index: last_use,
                timeout,
            })
            .map_err(map_poll_error)?;
    }
    match outcome.load(Ordering::Acquire) {
        MAPPED => {
            block.map = state;
            Ok(())
        }
        FAILED => Err(map_mapping_error(
            "Buffer::map_async",
            format!(
                "mapping a {}-byte {} block failed",
                block.size,
                block.kind.name()
            ),
        )),
        _ => {
            // The callback is still registered; leave the buffer to wgpu (unmap cancels it).
            block.buffer.unmap();
            Err(map_mapping_error(
                "Buffer::map_async",
                "the map callback did not fire after waiting for the block's last submission"
                    .into(),
            ))
        }
    }
}

/// The view range `[lo, hi)` wgpu accepts that encloses `offset .. offset + len`.
fn view_range(block: &Block, offset: u64, len: u64) -> Result<(u64, u64)> {
    let lo = align_down(offset, wgpu::MAP_ALIGNMENT);
    let end = offset + len; // checked by the caller's bounds check
    let hi =
        align_up(end, wgpu::COPY_BUFFER_ALIGNMENT).ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("wgpu: mapped range end {end} rounded up to the copy alignment"),
            limit_name: "u64",
        })?;
    debug_assert!(hi <= block.buffer.size());
    Ok((lo, hi))
}

/// Copies `data` into the mapped (`Write`) block at `offset`.
///
/// # Errors
/// [`Error::Backend`] when wgpu refuses the view.
pub(crate) fn write(block: &Block, offset: u64, data: &[u8]) -> Result<()> {
    debug_assert_eq!(block.map, MapState::Write);
    let (lo, hi) = view_range(block, offset, data.len() as u64)?;
    let mut view = block
        .buffer
        .slice(lo..hi)
        .get_mapped_range_mut()
        .map_err(|e| map_mapping_error("BufferSlice::get_mapped_range_mut", e.to_string()))?;
    let start = (offset - lo) as usize;
    view.slice(start..start + data.len()).copy_from_slice(data);
    Ok(())
}

/// Copies from the mapped (`Read`) block at `offset` into `out`.
///
/// # Errors
/// [`Error::Backend`] when wgpu refuses the view.
pub(crate) fn read(block: &Block, offset: u64, out: &mut [u8]) -> Result<()> {
    debug_assert_eq!(block.map, MapState::Read);
    let (lo, hi) = view_range(block, offset, out.len() as u64)?;
    let view = block
        .buffer
        .slice(lo..hi)
        .get_mapped_range()
        .map_err(|e| map_mapping_error("BufferSlice::get_mapped_range", e.to_string()))?;
    let start = (offset - lo) as usize;
    out.copy_from_slice(&view[start..start + out.len()]);
    Ok(())
}

/// The error for host access to a block that is not host-visible.
pub(crate) fn not_host_visible(block: &Block, access: &str) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: format!(
            "{access} of a {} block that is not host-visible (device-local blocks are mappable \
             only on unified-memory adapters without force_staging)",
            block.kind.name()
        ),
    }
}
