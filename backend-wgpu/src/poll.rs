//! Completion without blocking: `Backend::poll_ticket` and `Backend::poll_host_access` for wgpu.
//!
//! In a browser WebGPU resolves `onSubmittedWorkDone` and `mapAsync` promises from the event
//! loop; their callbacks (in `timeline` and `mapping`) record the result and wake the task that
//! registered here, so an awaiting task is polled again exactly when something changed.
//!
//! Natively wgpu runs those callbacks only inside `Device::poll`, and nothing polls the device
//! on its own. Each poll here therefore calls `Device::poll(Poll)` (non-blocking) and, while
//! still pending, asks the executor to poll again: an awaiting native task drives the device
//! itself. Native code that prefers to sleep uses the blocking `Backend::wait`.

use std::task::{Context, Poll};

use tensormem_contract::{HostAccess, MappedAccess, Result, Ticket};

use crate::WgpuBackend;
use crate::blocks::MapState;
use crate::blocks::mapping;
use crate::error::lock;

impl WgpuBackend {
    /// `Backend::poll_ticket`: submit the ticket's batch if still open, then compare with the
    /// completed ticket; register the waker while pending.
    pub(crate) fn poll_ticket_impl(
        &self,
        ticket: Ticket,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        let step = (|| -> Result<bool> {
            self.health.check()?;
            let mut state = lock(&self.state);
            state.timeline.check_issued(ticket)?;
            if ticket.0 >= state.timeline.open() {
                state.timeline.submit(&self.queue);
            }
            self.drive()?;
            if state.timeline.completed() >= ticket.0 {
                return Ok(true);
            }
            state.timeline.register(ticket, cx.waker());
            self.poll_again(cx);
            // A callback may have run between the first look and the registration.
            Ok(state.timeline.completed() >= ticket.0)
        })();
        match step {
            // A lost device also completes waits: report it rather than a finished ticket.
            Ok(true) => Poll::Ready(self.health.check()),
            Ok(false) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// `Backend::poll_host_access`: start mapping the block for the requested access (after
    /// submitting the open batch if it uses the block), then observe the mapping; register the
    /// waker while pending.
    pub(crate) fn poll_host_access_impl(
        &self,
        request: MappedAccess,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        let MappedAccess { block, access } = request;
        let step = (|| -> Result<Option<()>> {
            self.health.check()?;
            let mut guard = lock(&self.state);
            let state = &mut *guard;
            let b = state.blocks.get(block)?;
            if !b.mappable() {
                return Err(mapping::not_host_visible(b, "host access"));
            }
            let (want, usage) = match access {
                HostAccess::Read => (MapState::Read, wgpu::BufferUsages::MAP_READ),
                HostAccess::Write => (MapState::Write, wgpu::BufferUsages::MAP_WRITE),
            };
            if !b.buffer.usage().contains(usage) {
                // Writes into a readback block go through the queue, reads of an upload block
                // are emulated natively and refused in a browser: nothing to map either way.
                return Ok(Some(()));
            }
            if b.map == want {
                return Ok(Some(()));
            }
            if b.pending.as_ref().is_none_or(|p| p.state != want) {
                self.prepare_host_access(state, block)?;
                mapping::start(state.blocks.get_mut(block)?, want);
            }
            self.drive()?;
            match mapping::poll_pending(state.blocks.get_mut(block)?, cx) {
                Poll::Ready(r) => r.map(Some),
                Poll::Pending => {
                    self.poll_again(cx);
                    Ok(None)
                }
            }
        })();
        match step {
            Ok(Some(())) => Poll::Ready(Ok(())),
            Ok(None) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Natively, runs wgpu's ready callbacks (non-blocking). In a browser the event loop does.
    fn drive(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::Poll)
            .map_err(crate::error::map_poll_error)?;
        Ok(())
    }

    /// Natively, asks to be polled again (only `Device::poll` fires callbacks). In a browser the
    /// registered waker is enough.
    fn poll_again(&self, cx: &mut Context<'_>) {
        #[cfg(not(target_arch = "wasm32"))]
        cx.waker().wake_by_ref();
        #[cfg(target_arch = "wasm32")]
        let _ = cx;
    }
}
