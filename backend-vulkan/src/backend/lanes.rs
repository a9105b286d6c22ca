//! The transfer lane on Vulkan ([`tensormem_contract::backend::lanes`]): its own submissions and timeline
//! semaphore, on the queue [`LaneQueue`](crate::LaneQueue) names, beside the compute lane's.
//!
//! Cross-lane order is a semaphore wait between the two timelines, never a host wait:
//! `transfer_after(c)` makes the transfer lane's next submission wait for the compute semaphore
//! to reach `c`; `compute_after(t)` opens a compute batch that waits for the transfer semaphore
//! to reach `t` and returns its ticket (the joined ticket: it completes only after `t`). A
//! semaphore wait is a full execution and memory dependency, so the other lane's writes are
//! visible to the waiting lane's commands without barriers; each lane's hazard tracker only
//! orders that lane's own commands.
//!
//! No deadlock, on any queue choice: before a lane waits for a value, the other lane's batch that
//! signals it is submitted (`Timeline::issue`), and work recorded before the order is submitted
//! without the wait (`Timeline::order_after`). So every wait refers to a signal submitted
//! earlier, which matters most on one queue (lavapipe), whose submissions run in order. The
//! cost: an order ends the open batch of both lanes, so an executor that interleaves copies and
//! kernels with orders between them submits about once per command.
//!
//! With [`TransferQueue::Off`](crate::TransferQueue::Off) there is no transfer timeline: transfer
//! work is recorded on the compute lane and a transfer ticket is the compute ticket of its work
//! (the contract's collapsed lane). The backend offers its lane even then, so a direct caller's
//! ticket never issued is still refused on both lanes.

use std::task::{Context, Poll};
use std::time::Duration;

use tensormem_contract::backend::BlockRange;
use tensormem_contract::{
    Backend, Error, Result, Ticket, TransferLane, TransferLanes, TransferTicket,
};

use super::VulkanBackend;
use crate::timeline::Lane;

/// The error for a ticket beyond the last one a lane issued.
fn unknown(ticket: u64, issued: Ticket) -> Error {
    Error::UnknownTicket {
        ticket,
        issued: issued.0,
    }
}

impl TransferLanes for VulkanBackend {
    fn transfer_lane(&self) -> TransferLane {
        if self.lock().transfer.is_some() {
            TransferLane::Concurrent
        } else {
            TransferLane::Collapsed
        }
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.record_copy(Lane::Transfer, src, dst)
            .map(|t| TransferTicket(t.0))
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        self.record_fill(Lane::Transfer, range)
            .map(|t| TransferTicket(t.0))
    }

    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let Some(transfer) = s.transfer.as_mut() else {
            // Collapsed: transfer work already runs in compute order.
            let issued = s.compute.open_ticket();
            return if ticket > issued {
                Err(unknown(ticket.0, issued))
            } else {
                Ok(())
            };
        };
        // Submitted first: the wait must follow its signal (module doc).
        if !s.compute.issue(&s.gpu, ticket.0)? {
            return Err(unknown(ticket.0, s.compute.submitted()));
        }
        if ticket == Ticket::DONE || s.compute.counter(&s.gpu)? >= ticket.0 {
            return Ok(());
        }
        transfer.order_after(&s.gpu, ticket.0)
    }

    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let Some(transfer) = s.transfer.as_mut() else {
            let issued = s.compute.open_ticket();
            if ticket.0 > issued.0 {
                return Err(unknown(ticket.0, issued));
            }
            return Ok(Ticket(ticket.0));
        };
        // Submitted first: the wait must follow its signal (module doc).
        if !transfer.issue(&s.gpu, ticket.0)? {
            return Err(unknown(ticket.0, transfer.submitted()));
        }
        if ticket == TransferTicket::DONE || transfer.counter(&s.gpu)? >= ticket.0 {
            // Already finished: any later compute ticket completes after it.
            return Ok(s.compute.open_ticket());
        }
        s.compute.join(&s.gpu, &mut s.allocator, ticket.0)
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let Some(transfer) = s.transfer.as_mut() else {
            drop(guard);
            return self.completed().map(|t| TransferTicket(t.0));
        };
        let submitted = transfer.submit(&s.gpu)?;
        let done = transfer.recycle(&s.gpu)?;
        Ok(TransferTicket(done.min(submitted.0)))
    }

    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let limit = timeout.unwrap_or(self.config.wait_timeout);
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let Some(transfer) = s.transfer.as_mut() else {
            drop(guard);
            return self.wait_timeout(Ticket(ticket.0), Some(limit));
        };
        if !transfer.issue(&s.gpu, ticket.0)? {
            return Err(unknown(ticket.0, transfer.submitted()));
        }
        transfer.wait_until(&s.gpu, ticket.0, limit)
    }

    /// Submits, compares with the lane's semaphore, and asks to be polled again while pending
    /// (the driver reports completion only when asked, as on the compute lane).
    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut guard = self.lock();
        let s = &mut *guard;
        if let Err(e) = s.check_alive() {
            return Poll::Ready(Err(e));
        }
        let Some(transfer) = s.transfer.as_mut() else {
            drop(guard);
            return self.poll_ticket(Ticket(ticket.0), cx);
        };
        let polled = transfer.issue(&s.gpu, ticket.0).and_then(|issued| {
            if !issued {
                return Err(unknown(ticket.0, transfer.submitted()));
            }
            transfer.recycle(&s.gpu)
        });
        match polled {
            Err(e) => Poll::Ready(Err(e)),
            Ok(done) if done >= ticket.0 => Poll::Ready(Ok(())),
            Ok(_) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// Measured with timestamps on the compute queue around each join (`timeline::stamps`),
    /// over the batches completed so far; `None` with the lane off (no cross-lane waits) or
    /// where the compute family writes no timestamps.
    fn transfer_stall(&self) -> Option<Duration> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.transfer.as_ref()?;
        // Reads the batches completed meanwhile; never blocks. An error here (a lost device)
        // reaches the caller through its next call; the total so far stays valid.
        let _ = s.compute.recycle(&s.gpu);
        s.compute.stalled()
    }
}
