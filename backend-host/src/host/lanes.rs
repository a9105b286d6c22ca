//! The host backend's transfer lane ([`crate::backend::lanes`]): a second worker thread with its
//! own tickets, so copies on it run while the compute worker runs kernels. Cross-lane orders are
//! commands the workers execute (`queue`): the waiting worker blocks on the other's counter,
//! and the compute worker times each such wait (the lane's stall).

use std::task::{Context, Poll};
use std::time::Duration;

use super::HostBackend;
use super::queue::Command;
use crate::Result;
use crate::backend::{BlockRange, Ticket, TransferLane, TransferLanes, TransferTicket};

impl TransferLanes for HostBackend {
    fn transfer_lane(&self) -> TransferLane {
        TransferLane::Concurrent
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.enqueue_transfer(self.copy_command(src, dst)?)
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        self.enqueue_transfer(self.fill_command(range)?)
    }

    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        self.check_alive()?;
        self.compute.check_issued(ticket.0)?;
        if self.compute.timeline.completed() < ticket.0 {
            self.enqueue_transfer(Command::After(self.compute.timeline.clone(), ticket.0))?;
        }
        Ok(())
    }

    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.check_alive()?;
        self.transfer.check_issued(ticket.0)?;
        self.enqueue(Command::After(self.transfer.timeline.clone(), ticket.0))
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        self.check_alive()?;
        Ok(TransferTicket(self.transfer.timeline.completed()))
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.check_alive()?;
        self.transfer.check_issued(ticket.0)?;
        self.transfer.wait(ticket.0, timeout, "transfer ticket")?;
        self.check_alive()
    }

    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check_alive().and(self.transfer.check_issued(ticket.0)) {
            return Poll::Ready(Err(e));
        }
        self.transfer
            .poll(ticket.0, cx)
            .map(|()| self.check_alive())
    }

    /// Measured by the compute worker around each cross-lane wait.
    fn transfer_stall(&self) -> Option<Duration> {
        Some(self.compute.waited())
    }
}
