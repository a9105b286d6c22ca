//! The transfer lane on Vulkan ([`tensormem::backend::lanes`]): its own submissions and timeline
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
//! earlier, which matters most on one queue (lavapipe), whose submissions run in order.
//!
//! With [`TransferQueue::Off`](crate::TransferQueue::Off) there is no transfer timeline: transfer
//! work is recorded on the compute lane and a transfer ticket is the compute ticket of its work
//! (the contract's collapsed lane).

use std::task::{Context, Poll};
use std::time::Duration;

use tensormem::{Backend, Error, Result, Ticket, TransferTicket};

use super::VulkanBackend;

/// The error for a ticket beyond the last one a lane issued.
fn unknown(ticket: u64, issued: Ticket) -> Error {
    Error::UnknownTicket {
        ticket,
        issued: issued.0,
    }
}

impl VulkanBackend {
    pub(crate) fn transfer_after_vk(&self, ticket: Ticket) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let issued = s.compute.open_ticket();
        if ticket > issued {
            return Err(unknown(ticket.0, issued));
        }
        let Some(transfer) = s.transfer.as_mut() else {
            // Collapsed: transfer work already runs in compute order.
            return Ok(());
        };
        if ticket == Ticket::DONE || s.compute.counter(&s.gpu)? >= ticket.0 {
            return Ok(());
        }
        s.compute.issue(&s.gpu, ticket.0)?;
        transfer.order_after(&s.gpu, ticket.0)
    }

    pub(crate) fn compute_after_vk(&self, ticket: TransferTicket) -> Result<Ticket> {
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
        let issued = transfer.open_ticket();
        if ticket.0 > issued.0 {
            return Err(unknown(ticket.0, issued));
        }
        if ticket == TransferTicket::DONE || transfer.counter(&s.gpu)? >= ticket.0 {
            // Already finished: any later compute ticket completes after it.
            return Ok(s.compute.open_ticket());
        }
        transfer.issue(&s.gpu, ticket.0)?;
        s.compute.join(&s.gpu, &mut s.allocator, ticket.0)
    }

    pub(crate) fn transfer_completed_vk(&self) -> Result<TransferTicket> {
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

    pub(crate) fn wait_transfer_vk(&self, ticket: TransferTicket, limit: Duration) -> Result<()> {
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
    pub(crate) fn poll_transfer_vk(
        &self,
        ticket: TransferTicket,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
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
}
