//! Host access to mappable blocks over wgpu's asynchronous mapping: polled (every target) and
//! synchronous (native only).
//!
//! [`start`] and [`poll_pending`] are the non-blocking form behind `Backend::poll_host_access`:
//! the `map_async` callback records the outcome and wakes the awaiting task (in a browser it
//! fires when WebGPU resolves `mapAsync`'s promise). On `wasm32` that is the only form: a
//! `read_mapped` / `write_mapped` on a block that is not mapped yet is an error, never a block.
//!
//! Natively wgpu's callbacks fire during `Device::poll`. [`ensure_mapped`]
//! maps the *whole* buffer in the needed mode and polls until the callback has fired: first a
//! non-blocking poll (the usual case: the buffer is idle), then a blocking wait for the
//! submission that last used the block. The mapping is kept afterwards, so a run of writes into
//! an upload block costs one map; any device use unmaps it again (`Block::unmap`).
//!
//! Views must start at a multiple of `MAP_ALIGNMENT` (8) and span a multiple of 4 bytes, while
//! the contract only promises 4-aligned offsets: [`write`] and [`read`] widen the view to the
//! enclosing aligned range and copy the requested bytes inside it.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
#[cfg(not(target_arch = "wasm32"))]
use std::time::{Duration, Instant};

use tensormem_contract::{Error, Result};

use super::{Block, MapState};
use crate::conv::{align_down, align_up};
use crate::error::{BACKEND, lock, map_mapping_error};

/// Callback outcome: still pending.
const PENDING: u8 = 0;
/// Callback outcome: mapped.
const MAPPED: u8 = 1;
/// Callback outcome: the mapping failed.
const FAILED: u8 = 2;

/// The `map_async` outcome and the task to wake when it arrives.
#[derive(Debug)]
struct Signal {
    outcome: u8,
    waker: Option<Waker>,
}

/// A mapping in progress: the state it will reach and its callback's signal.
#[derive(Debug)]
pub(crate) struct PendingMap {
    /// `Read` or `Write`.
    pub(crate) state: MapState,
    signal: Arc<Mutex<Signal>>,
}

/// Starts mapping the whole of `block` for `state` (`Read` or `Write`), unmapping it first.
/// [`poll_pending`] observes the outcome.
pub(crate) fn start(block: &mut Block, state: MapState) {
    debug_assert!(state != MapState::Unmapped);
    block.unmap();
    let mode = match state {
        MapState::Write => wgpu::MapMode::Write,
        _ => wgpu::MapMode::Read,
    };
    let signal = Arc::new(Mutex::new(Signal {
        outcome: PENDING,
        waker: None,
    }));
    let on_done = Arc::clone(&signal);
    block.buffer.map_async(mode, .., move |result| {
        let waker = {
            let mut s = lock(&on_done);
            s.outcome = if result.is_ok() { MAPPED } else { FAILED };
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    });
    block.pending = Some(PendingMap { state, signal });
}

/// Observes the pending mapping of `block`: ready once mapped (the block's `map` is then set),
/// else registers `cx`'s waker with the callback.
///
/// # Errors
/// [`Error::Backend`] when wgpu refused the mapping.
pub(crate) fn poll_pending(block: &mut Block, cx: &mut Context<'_>) -> Poll<Result<()>> {
    let Some(pending) = &block.pending else {
        return Poll::Ready(Ok(()));
    };
    let outcome = {
        let mut s = lock(&pending.signal);
        if s.outcome == PENDING {
            s.waker = Some(cx.waker().clone());
        }
        s.outcome
    };
    match outcome {
        MAPPED => {
            block.map = pending.state;
            block.pending = None;
            Poll::Ready(Ok(()))
        }
        FAILED => {
            block.pending = None;
            Poll::Ready(Err(map_failed(block)))
        }
        _ => Poll::Pending,
    }
}

fn map_failed(block: &Block) -> Error {
    map_mapping_error(
        "Buffer::map_async",
        format!(
            "mapping a {}-byte {} block failed",
            block.size,
            block.kind.name()
        ),
    )
}

/// Maps `block` in `state` (`Read` or `Write`), remapping when it is mapped the other way.
///
/// `last_use` is the submission that last used the block, if it may still be in flight: the
/// mapping completes only after it, so that is what a blocking poll waits for.
///
/// # Errors
/// [`Error::Backend`] when wgpu refuses the mapping or the wait times out.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn ensure_mapped(
    device: &wgpu::Device,
    block: &mut Block,
    state: MapState,
    last_use: Option<wgpu::SubmissionIndex>,
    timeout: Option<Duration>,
) -> Result<()> {
    use crate::error::{map_poll_error, poll_wait};
    if block.map == state {
        return Ok(());
    }
    if block.pending.as_ref().is_none_or(|p| p.state != state) {
        start(block, state);
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    device.poll(wgpu::PollType::Poll).map_err(map_poll_error)?;
    if let Poll::Ready(r) = poll_pending(block, &mut cx) {
        return r;
    }
    poll_wait(device, last_use, timeout, || {
        format!(
            "the last use of a {}-byte {} block before mapping it",
            block.size,
            block.kind.name()
        )
    })?;
    // The submission is done, but the callback may have been taken by another thread's
    // concurrent `Device::poll`, which fires it after releasing wgpu's lock. Park until that
    // thread wakes us, polling in case no other thread is polling.
    let deadline = Instant::now() + timeout.map_or(CALLBACK_GRACE, |t| t.min(CALLBACK_GRACE));
    loop {
        if let Poll::Ready(r) = poll_pending(block, &mut cx) {
            return r;
        }
        if Instant::now() >= deadline {
            // The callback is still registered; unmapping cancels it.
            block.unmap();
            return Err(map_mapping_error(
                "Buffer::map_async",
                "the map callback did not fire after waiting for the block's last submission"
                    .into(),
            ));
        }
        device.poll(wgpu::PollType::Poll).map_err(map_poll_error)?;
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

/// How long [`ensure_mapped`] waits for a callback that another thread's poll has taken.
#[cfg(not(target_arch = "wasm32"))]
const CALLBACK_GRACE: Duration = Duration::from_secs(5);

/// Wakes a parked thread: the waker [`ensure_mapped`] registers with the map callback.
#[cfg(not(target_arch = "wasm32"))]
struct Unpark(std::thread::Thread);

#[cfg(not(target_arch = "wasm32"))]
impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// In a browser nothing may block: the block must already be mapped by an awaited
/// `Backend::poll_host_access`.
///
/// # Errors
/// [`Error::Unsupported`] when it is not.
#[cfg(target_arch = "wasm32")]
pub(crate) fn ensure_mapped(block: &mut Block, state: MapState) -> Result<()> {
    if block.map == state {
        return Ok(());
    }
    Err(Error::Unsupported {
        backend: BACKEND,
        what: format!(
            "synchronous mapping of a {} block in a browser: await \
             tensormem_contract::HostAccessWait (Backend::poll_host_access) first",
            block.kind.name()
        ),
    })
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
