//! The lane every backend has: the backend's own where it offers one, else the compute queue.
//!
//! [`of`] returns a [`Lanes`], which dereferences to the [`TransferLanes`] to call: the
//! backend's (through [`Extensions::transfer_lanes`](crate::backend::Extensions::transfer_lanes)) or a [`CollapsedLane`] built on the spot. A
//! collapsed lane enqueues transfer work as compute work ([`Backend::copy`],
//! [`Backend::fill_zero`]), and a transfer ticket is the compute ticket of that work, so every
//! cross-lane order already holds by queue order. It keeps no state and checks nothing beyond
//! what the compute calls check (a front in between checks tickets).

use std::ops::Deref;
use std::task::{Context, Poll};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

use super::{TransferLane, TransferLanes, TransferTicket};
use crate::Result;
use crate::backend::{Backend, BlockRange, Ticket};

/// The transfer lane of `backend`: its own where [`Extensions::transfer_lanes`](crate::backend::Extensions::transfer_lanes) offers one, else a
/// [`CollapsedLane`] over its compute queue. Costs one virtual call and no allocation.
pub fn of(backend: &dyn Backend) -> Lanes<'_> {
    Lanes(match backend.transfer_lanes() {
        Some(own) => Reach::Own(own),
        None => Reach::Collapsed(CollapsedLane(backend)),
    })
}

/// A backend's transfer lane, as [`of`] returns it: dereferences to [`TransferLanes`].
pub struct Lanes<'a>(Reach<'a>);

enum Reach<'a> {
    Own(&'a dyn TransferLanes),
    Collapsed(CollapsedLane<'a>),
}

impl<'a> Deref for Lanes<'a> {
    type Target = dyn TransferLanes + 'a;

    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Reach::Own(own) => *own,
            Reach::Collapsed(lane) => lane,
        }
    }
}

/// The transfer lane of a backend with one queue: transfer work is compute work on it. See the
/// module doc.
pub struct CollapsedLane<'a>(pub &'a dyn Backend);

/// The compute ticket a collapsed lane's transfer ticket stands for.
fn collapsed(ticket: TransferTicket) -> Ticket {
    Ticket(ticket.0)
}

/// The transfer ticket of compute work on a collapsed lane.
fn as_transfer(ticket: Ticket) -> TransferTicket {
    TransferTicket(ticket.0)
}

impl TransferLanes for CollapsedLane<'_> {
    fn transfer_lane(&self) -> TransferLane {
        TransferLane::Collapsed
    }

    fn transfer_copy(&self, src: BlockRange, dst: BlockRange) -> Result<TransferTicket> {
        self.0.copy(src, dst).map(as_transfer)
    }

    fn transfer_fill_zero(&self, range: BlockRange) -> Result<TransferTicket> {
        self.0.fill_zero(range).map(as_transfer)
    }

    /// The lane already runs in compute order: nothing to do.
    fn transfer_after(&self, ticket: Ticket) -> Result<()> {
        let _ = ticket;
        Ok(())
    }

    /// The transfer ticket already is a compute ticket.
    fn compute_after(&self, ticket: TransferTicket) -> Result<Ticket> {
        Ok(collapsed(ticket))
    }

    fn transfer_completed(&self) -> Result<TransferTicket> {
        self.0.completed().map(as_transfer)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_transfer_timeout(
        &self,
        ticket: TransferTicket,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.0.wait_timeout(collapsed(ticket), timeout)
    }

    fn poll_transfer(&self, ticket: TransferTicket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.0.poll_ticket(collapsed(ticket), cx)
    }
}
