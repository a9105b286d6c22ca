//! The transfer lane on CUDA: a second stream (non-blocking, so it never serialises with the
//! legacy default stream) for copies and fills, with its own timeline of events
//! ([`tensormem_contract::backend::lanes`]).
//!
//! Cross-lane order is device-side: `transfer_after` and `compute_after` record an event on one
//! stream and make the other wait for it (`cuEventRecord` + `cuStreamWaitEvent`,
//! [`Timeline::join_from`](crate::timeline::Timeline)); the host never blocks. The compute
//! stream's waits are timed between two events (`stall.rs`, the lane's stall). A join waits for
//! everything enqueued on the other stream so far, which covers the ticket asked for (a wait
//! that may be longer than needed, never shorter).
//!
//! Memory from the stream-ordered pool (`cuMemAllocAsync` on the compute stream) may be used on
//! another stream only once the allocation is ordered before that use, so the lane joins the
//! compute stream before its first copy after such an allocation (counted in
//! `CudaBackend::stream_allocs`).

use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use cudarc::driver::{result, sys};
use tensormem_contract::backend::BlockRange;
use tensormem_contract::{Error, Result, Ticket, TransferLane, TransferLanes, TransferTicket};

use crate::CudaBackend;
use crate::conv::{Placement, to_usize};
use crate::error::map_driver_err;
use crate::launch::plan_fill_zero;

impl CudaBackend {
    /// Binds the context and fails fast once either stream saw a lost device.
    fn bind_transfer(&self) -> Result<()> {
        self.transfer.health().check()?;
        self.bind()
    }

    /// Orders the copy stream after every stream-ordered allocation made so far.
    fn order_after_allocations(&self) -> Result<()> {
        let made = self.stream_allocs.load(Ordering::SeqCst);
        if made > self.transfer_sees_allocs.load(Ordering::SeqCst) {
            self.transfer.join_from(self.stream())?;
            self.transfer_sees_allocs.fetch_max(made, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A second stream: copies on it overlap kernels on the compute stream.
impl TransferLanes for CudaBackend {
    fn transfer_lane(&self) -> TransferLane {
        TransferLane::Concurrent
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.check_copy(src, dst)?;
        self.bind_transfer()?;
        let (s, _) = self.resolve(src)?;
        let (d, _) = self.resolve(dst)?;
        self.order_after_allocations()?;
        let bytes = to_usize(src.size, "copy")?;
        let stream = self.transfer.stream().cu_stream();
        let t = self.transfer.submit(|| {
            // SAFETY: both ranges were checked inside live blocks; unified addressing makes
            // pinned host pointers valid here; the ranges do not overlap (checked above).
            unsafe { sys::cuMemcpyAsync(d, s, bytes, stream) }
                .result()
                .map_err(|e| map_driver_err("cuMemcpyAsync (copy stream)", e))
        })?;
        Ok(TransferTicket(t.0))
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        if range.size == 0 {
            return Err(Error::ZeroSize { what: "fill" });
        }
        self.bind_transfer()?;
        let (addr, placement) = self.resolve(range)?;
        self.order_after_allocations()?;
        let t = match placement {
            Placement::Device => {
                let bytes = to_usize(range.size, "fill")?;
                let stream = self.transfer.stream().cu_stream();
                self.transfer.submit(|| {
                    // SAFETY: the range is inside a live device block.
                    unsafe { result::memset_d8_async(addr, 0, bytes, stream) }
                        .map_err(|e| map_driver_err("cuMemsetD8Async (copy stream)", e))
                })?
            }
            Placement::PinnedHost { .. } | Placement::Managed => {
                let call = plan_fill_zero(addr, range.size);
                self.transfer
                    .submit(|| self.kernels.launch(self.transfer.stream(), &call))?
            }
        };
        Ok(TransferTicket(t.0))
    }

    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        self.bind_transfer()?;
        if self.timeline.known_completed() >= ticket {
            return Ok(());
        }
        self.transfer.join_from(self.stream()).map(drop)
    }

    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.bind_transfer()?;
        let issued = self.transfer.flush()?;
        if ticket.0 > issued.0 {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: issued.0,
            });
        }
        // Earlier waits read first: the pending list stays as short as the waits in flight.
        self.stall.settle()?;
        let pair = self.stall.pair()?;
        match self
            .timeline
            .join_from_timed(self.transfer.stream(), (&pair.0, &pair.1))
        {
            Ok(joined) => {
                self.stall.timed(pair);
                Ok(joined)
            }
            Err(e) => {
                self.stall.unused(pair);
                Err(e)
            }
        }
    }

    /// Timed on the compute stream around each wait for the copy stream: the timed waits read
    /// so far, after reading those that have passed (`stall.rs`).
    fn transfer_stall(&self) -> Option<std::time::Duration> {
        // A lost device shows in the caller's next call; the total so far stays valid.
        let _ = self.bind().and_then(|()| self.stall.settle());
        Some(self.stall.stalled())
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        self.bind_transfer()?;
        self.transfer.completed().map(|t| TransferTicket(t.0))
    }

    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        self.bind_transfer()?;
        self.transfer.wait(Ticket(ticket.0), timeout)
    }

    /// Submits, compares with the lane's completed ticket, and asks to be polled again while
    /// pending (CUDA reports completion only when asked, as the compute lane's default poll).
    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let polled = self.bind_transfer().and_then(|()| {
            let issued = self.transfer.flush()?;
            if ticket.0 > issued.0 {
                return Err(Error::UnknownTicket {
                    ticket: ticket.0,
                    issued: issued.0,
                });
            }
            self.transfer.completed()
        });
        match polled {
            Err(e) => Poll::Ready(Err(e)),
            Ok(done) if done.0 >= ticket.0 => Poll::Ready(Ok(())),
            Ok(_) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}
