//! How one budgeted run orders its copies on the transfer lane ([`crate::backend::lanes`]).
//!
//! Copies in (prefetches of streamed weights, swap-ins) and copies out (swap-outs) go on the
//! transfer lane, each after every kernel enqueued before it (`transfer_after` with the latest
//! compute ticket: the bytes a copy-in overwrites were last read by an earlier kernel, and the
//! bytes a copy-out reads were written by one). Kernels wait on the device, and only where they
//! must:
//!
//! * a kernel that reads a tensor whose copy-in is still on the lane joins that copy
//!   (`compute_after`);
//! * compute-lane work that writes arena bytes a copy-out still reads (a kernel's output, a
//!   staged upload) joins that copy-out first;
//! * the end of the run joins the whole lane, so the run's last ticket covers every copy (the
//!   pools' deferred frees and the host's reads wait for it).
//!
//! Copies on the lane are ordered among themselves, so a copy-in that reuses a copy-out's bytes
//! needs no join. Where the backend collapses the lane onto its compute queue every rule holds
//! by queue order and no join is issued; with the lane switched off
//! ([`CompileDesc::transfer_lane`](super::CompileDesc::transfer_lane)) every copy is compute
//! work, as before lanes.

use crate::Result;
use crate::backend::{Backend, BlockRange, Ticket, TransferLane, TransferTicket};

/// The lane state of one run.
pub(super) struct RunLanes {
    /// Copies go on the transfer lane (else on the compute queue).
    on: bool,
    /// The latest compute ticket the lane was ordered after.
    ordered_after: Ticket,
    /// The latest transfer ticket a compute join covers.
    joined: TransferTicket,
    /// The latest transfer ticket issued.
    issued: TransferTicket,
    /// Per root tensor: the transfer ticket of its copy-in (DONE when none is pending).
    arriving: Vec<TransferTicket>,
    /// Copy-outs not yet joined: arena offset, size, ticket.
    leaving: Vec<(u64, u64, TransferTicket)>,
}

impl RunLanes {
    /// The state for a run over `roots` tensors; `on` puts copies on the transfer lane where the
    /// backend has a concurrent one.
    pub(super) fn new(backend: &dyn Backend, on: bool, roots: usize) -> Self {
        RunLanes {
            on: on && backend.transfer_lane() == TransferLane::Concurrent,
            ordered_after: Ticket::DONE,
            joined: TransferTicket::DONE,
            issued: TransferTicket::DONE,
            arriving: vec![TransferTicket::DONE; roots],
            leaving: Vec::new(),
        }
    }

    /// Enqueues a copy after every compute ticket up to `last`. Returns its ticket on the lane, or
    /// (lane off) the compute ticket as a transfer ticket and the new `last`.
    fn copy(
        &mut self,
        backend: &dyn Backend,
        last: &mut Ticket,
        src: BlockRange,
        dst: BlockRange,
    ) -> Result<TransferTicket> {
        if !self.on {
            *last = backend.copy(src, dst)?;
            return Ok(TransferTicket(last.0));
        }
        if *last > self.ordered_after {
            backend.transfer_after(*last)?;
            self.ordered_after = *last;
        }
        let t = backend.transfer_copy(src, dst)?;
        self.issued = t;
        Ok(t)
    }

    /// A copy into root tensor `root`'s arena range `dst`.
    pub(super) fn copy_in(
        &mut self,
        backend: &dyn Backend,
        last: &mut Ticket,
        root: usize,
        src: BlockRange,
        dst: BlockRange,
    ) -> Result<()> {
        let t = self.copy(backend, last, src, dst)?;
        if self.on {
            self.arriving[root] = t;
        }
        Ok(())
    }

    /// A copy out of the arena at `offset` (`src`) into its host slot; returns the ticket the host
    /// waits for before reading the slot.
    pub(super) fn copy_out(
        &mut self,
        backend: &dyn Backend,
        last: &mut Ticket,
        offset: u64,
        src: BlockRange,
        dst: BlockRange,
    ) -> Result<TransferTicket> {
        let t = self.copy(backend, last, src, dst)?;
        if self.on {
            self.leaving.push((offset, src.size, t));
        }
        Ok(t)
    }

    /// Before compute work that reads the tensors `reads` and writes the arena ranges `writes`
    /// (offset, size): joins the copies it depends on (the compute work's own ticket then covers
    /// the join).
    pub(super) fn before_compute(
        &mut self,
        backend: &dyn Backend,
        reads: impl IntoIterator<Item = usize>,
        writes: &[(u64, u64)],
    ) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        let mut need = TransferTicket::DONE;
        for r in reads {
            need = need.max(self.arriving[r]);
        }
        for &(o, s) in writes {
            for &(lo, size, t) in &self.leaving {
                if lo < o + s && o < lo + size {
                    need = need.max(t);
                }
            }
        }
        self.join(backend, need).map(drop)
    }

    /// At the end of the run: joins the whole lane, so the returned ticket covers every copy.
    pub(super) fn finish(&mut self, backend: &dyn Backend) -> Result<Option<Ticket>> {
        let issued = self.issued;
        self.join(backend, issued)
    }

    /// Waits on the host for transfer `ticket` (a copy-out the host reads back).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn wait(&self, backend: &dyn Backend, ticket: TransferTicket) -> Result<()> {
        if self.on {
            backend.wait_transfer(ticket)
        } else {
            backend.wait(Ticket(ticket.0))
        }
    }

    fn join(&mut self, backend: &dyn Backend, need: TransferTicket) -> Result<Option<Ticket>> {
        if need <= self.joined {
            return Ok(None);
        }
        let joined = backend.compute_after(need)?;
        self.joined = need;
        self.leaving.retain(|l| l.2 > need);
        Ok(Some(joined))
    }
}
