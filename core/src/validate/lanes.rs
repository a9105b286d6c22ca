//! The front's transfer lane: the same checks as the compute lane's copies and fills, the
//! transfer tickets it issued, and the in-flight uses of transfer work until a joined compute
//! ticket covers them (see [`crate::backend::lanes`]).
//!
//! The front offers the lane on every backend and calls the lane behind it through
//! [`lanes::of`]: the backend's own, or the compute queue where the lane is collapsed. Its
//! ticket checks then hold on either, and it reports the kind of the lane behind it.

use std::task::{Context, Poll};

use crate::backend::{BlockRange, Ticket, TransferLane, TransferLanes, TransferTicket, lanes};
use crate::{Error, Result};

use super::Validated;

impl TransferLanes for Validated {
    fn transfer_lane(&self) -> TransferLane {
        lanes::of(self.backend.as_ref()).transfer_lane()
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.transfer_copy_checked(src, dst)
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        self.transfer_fill_checked(range)
    }

    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        self.check_issued(ticket)?;
        self.observe(lanes::of(self.backend.as_ref()).transfer_after(ticket))
    }

    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.compute_after_checked(ticket)
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        self.transfer_completed_checked()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        self.wait_transfer_checked(ticket, timeout.or(self.wait_timeout))
    }

    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_transfer_checked(ticket, cx)
    }

    fn transfer_stall(&self) -> Option<std::time::Duration> {
        lanes::of(self.backend.as_ref()).transfer_stall()
    }
}

impl Validated {
    fn transfer_copy_checked(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.check_copy(src, dst)?;
        let t = self.observe(lanes::of(self.backend.as_ref()).transfer_copy(src, dst))?;
        self.transfer_issued(t, &[src, dst]);
        Ok(t)
    }

    fn transfer_fill_checked(&self, range: BlockRange) -> Result<TransferTicket> {
        self.check_fill(range)?;
        let t = self.observe(lanes::of(self.backend.as_ref()).transfer_fill_zero(range))?;
        self.transfer_issued(t, &[range]);
        Ok(t)
    }

    /// Joins transfer `ticket` on the compute lane; the transfer uses it covers become uses of the
    /// joined ticket, where a free finds them.
    pub(super) fn compute_after_checked(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.check_transfer_issued(ticket)?;
        let joined = self.observe(lanes::of(self.backend.as_ref()).compute_after(ticket))?;
        let mut st = self.lock();
        st.issued = st.issued.max(joined);
        let covered = st.transfer_uses.take_through(Ticket(ticket.0));
        st.uses.record(joined, &covered);
        Ok(joined)
    }

    /// Joins every transfer still in flight through this front on the compute lane (what a
    /// synchronize waits for); [`Ticket::DONE`] when there is none.
    ///
    /// # Errors
    /// As [`TransferLanes::compute_after`].
    pub fn join_transfers(&self) -> Result<Ticket> {
        let (pending, issued) = {
            let st = self.lock();
            (st.transfer_uses.len() > 0, st.transfer_issued)
        };
        if pending {
            self.compute_after_checked(issued)
        } else {
            Ok(Ticket::DONE)
        }
    }

    fn transfer_completed_checked(&self) -> Result<TransferTicket> {
        self.check_alive()?;
        let t = self.observe(lanes::of(self.backend.as_ref()).transfer_completed())?;
        self.lock().transfer_uses.completed(Ticket(t.0));
        Ok(t)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_checked(
        &self,
        ticket: TransferTicket,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        self.check_transfer_issued(ticket)?;
        self.observe(lanes::of(self.backend.as_ref()).wait_transfer_timeout(ticket, timeout))?;
        self.lock().transfer_uses.completed(Ticket(ticket.0));
        Ok(())
    }

    fn poll_transfer_checked(
        &self,
        ticket: TransferTicket,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if let Err(e) = self.check_transfer_issued(ticket) {
            return Poll::Ready(Err(e));
        }
        lanes::of(self.backend.as_ref())
            .poll_transfer(ticket, cx)
            .map(|r| {
                self.observe(r)?;
                self.lock().transfer_uses.completed(Ticket(ticket.0));
                Ok(())
            })
    }

    fn transfer_issued(&self, ticket: TransferTicket, ranges: &[BlockRange]) {
        let refresh = {
            let mut st = self.lock();
            st.transfer_issued = st.transfer_issued.max(ticket);
            st.transfer_uses.record(Ticket(ticket.0), ranges);
            st.transfer_uses.len() >= super::USES_REFRESH
        };
        if refresh {
            let _ = self.transfer_completed_checked();
        }
    }

    /// `Ok` when the device is alive and transfer `ticket` was issued through this front
    /// (waiting for one never issued would never end).
    ///
    /// # Errors
    /// [`Error::DeviceLost`], [`Error::UnknownTicket`].
    fn check_transfer_issued(&self, ticket: TransferTicket) -> Result<()> {
        self.check_alive()?;
        let issued = self.lock().transfer_issued;
        if ticket > issued {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: issued.0,
            });
        }
        Ok(())
    }
}
