//! The front's transfer-lane calls: the same checks as the compute lane's copies and fills, the
//! transfer tickets it issued, and the in-flight uses of transfer work until a joined compute
//! ticket covers them (see [`crate::backend::lanes`]).

use std::task::{Context, Poll};

use crate::backend::{BlockRange, Ticket, TransferTicket};
use crate::{Error, Result};

use super::Validated;

impl Validated {
    pub(super) fn transfer_copy_checked(
        &self,
        src: BlockRange,
        dst: BlockRange,
    ) -> Result<TransferTicket> {
        self.check_copy(src, dst)?;
        let t = self.observe(self.backend.transfer_copy(src, dst))?;
        self.transfer_issued(t, &[src, dst]);
        Ok(t)
    }

    pub(super) fn transfer_fill_checked(&self, range: BlockRange) -> Result<TransferTicket> {
        self.check_fill(range)?;
        let t = self.observe(self.backend.transfer_fill_zero(range))?;
        self.transfer_issued(t, &[range]);
        Ok(t)
    }

    /// Joins transfer `ticket` on the compute lane; the transfer uses it covers become uses of the
    /// joined ticket, where a free finds them.
    pub(super) fn compute_after_checked(&self, ticket: TransferTicket) -> Result<Ticket> {
        self.check_transfer_issued(ticket)?;
        let joined = self.observe(self.backend.compute_after(ticket))?;
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
    /// As [`crate::Backend::compute_after`].
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

    pub(super) fn transfer_completed_checked(&self) -> Result<TransferTicket> {
        self.check_alive()?;
        let t = self.observe(self.backend.transfer_completed())?;
        self.lock().transfer_uses.completed(Ticket(t.0));
        Ok(t)
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn wait_transfer_checked(
        &self,
        ticket: TransferTicket,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        self.check_transfer_issued(ticket)?;
        self.observe(self.backend.wait_transfer_timeout(ticket, timeout))?;
        self.lock().transfer_uses.completed(Ticket(ticket.0));
        Ok(())
    }

    pub(super) fn poll_transfer_checked(
        &self,
        ticket: TransferTicket,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if let Err(e) = self.check_transfer_issued(ticket) {
            return Poll::Ready(Err(e));
        }
        self.backend.poll_transfer(ticket, cx).map(|r| {
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
