//! One budgeted run on the backend's lanes: [`Offloaded::enqueue`] issues the arrivals, kernels
//! and copy-outs of a run, and [`RunLanes`] orders its copies on the transfer lane
//! ([`crate::backend::lanes`]).
//!
//! Copies in (prefetches of streamed weights, swap-ins that are device copies) and copies out
//! (swap-outs) go on the transfer lane, each after every kernel enqueued before it (`transfer_after` with the latest
//! compute ticket: the bytes a copy-in overwrites were last read by an earlier kernel, and the
//! bytes a copy-out reads were written by one). Kernels wait on the device, and only where they
//! must:
//!
//! * a kernel that binds a tensor whose copy-in is still on the lane joins that copy
//!   (`compute_after`), whether it reads the tensor or writes part of it (a tiled chain's view:
//!   the copy brings back the other parts);
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

use std::time::Duration;

use crate::backend::{
    Backend, BlockRange, HostAccess, Ticket, TransferLane, TransferTicket, Waiting, lanes,
};
use crate::offload::Arrival;
use crate::pool::DevicePool;
use crate::runtime::Runtime;
use crate::time::Instant;
use crate::trace::{Access, TransferKind};
use crate::{Error, Result};

use super::{Offloaded, Site};

impl Offloaded {
    /// Enqueues one run: arrivals, dispatches, copy-outs (module doc). Returns the last ticket,
    /// which covers the run's copies on the transfer lane too. A swap-in through the host and a
    /// staged lookup wait (for the copy-out, the readback's mapping, a staging region) in
    /// `waiting`'s mode; nothing else waits ([`Offloaded::waits_on_host`]).
    pub(in crate::runtime::model) async fn enqueue(
        &mut self,
        waiting: Waiting,
        rt: &Runtime,
        graph: &crate::Graph,
    ) -> Result<Ticket> {
        rt.front().check_alive()?;
        let backend = rt.backend().clone();
        let b = backend.as_ref();
        self.stall_mark = lanes::of(b).transfer_stall();
        let mut lanes = RunLanes::new(b, self.transfer_lane, self.sizes.len());
        let mut stall = Duration::ZERO;
        // The previous run's last ticket: this run's first copies must not overwrite bytes its
        // kernels still read.
        let mut last = self.last;
        let mut bindings = Vec::with_capacity(4);
        for (k, node) in graph.nodes().iter().enumerate() {
            if let Some(trace) = &mut self.trace {
                trace.open(k, &self.sizes, |t| tensor_name(graph, t));
            }
            for &(t, offset, arrival) in &self.arrive[k] {
                let size = self.sizes[t];
                if let (Some(trace), false) = (&self.trace, arrival == Arrival::InPlace) {
                    trace.arrive(t, size, transfer_kind(arrival));
                }
                let dst = self.arena_range(offset, size)?;
                match arrival {
                    Arrival::Prefetch => {
                        let master = self.host[t].ok_or_else(|| {
                            Error::invariant("a streamed weight has a master", format!("{t}"))
                        })?;
                        let src = self.upload.resolve(master.handle)?;
                        lanes.copy_in(b, &mut last, t, src, dst)?;
                    }
                    Arrival::SwapIn => {
                        let s = self.slot[t].ok_or_else(|| {
                            Error::invariant("a swapped tensor has a slot", format!("{t}"))
                        })?;
                        let src = self.readback.resolve(s.handle)?;
                        if self.direct_swap_in {
                            lanes.swap_in(b, &mut last, t, src, dst, self.out_ticket[t])?;
                        } else {
                            let waited = Instant::now();
                            lanes.wait(waiting, b, self.out_ticket[t]).await?;
                            waiting.host_access(b, src.block, HostAccess::Read).await?;
                            stall += waited.elapsed();
                            let mut buf = vec![0u8; size as usize];
                            b.read_mapped(src.block, src.offset, &mut buf)?;
                            lanes.before_compute(b, [], &[(offset, size)])?;
                            last = rt.staging().upload_with(waiting, dst, &buf).await?;
                        }
                    }
                    Arrival::HostWrite => {
                        let (gi, part) = self.staged_part[t].ok_or_else(|| {
                            Error::invariant("a staged tensor belongs to a lookup", format!("{t}"))
                        })?;
                        let bytes = self.gathers[gi].gather(part, &self.host_copy, size);
                        lanes.before_compute(b, [], &[(offset, size)])?;
                        last = rt.staging().upload_with(waiting, dst, &bytes).await?;
                    }
                    // Re-runs are compute work, enqueued below ([`Offloaded::rerun`]).
                    Arrival::InPlace | Arrival::Recompute { .. } => continue,
                }
                self.report.bytes_to_device += size;
            }
            self.rerun(b, graph, &mut lanes, k)?;
            bindings.clear();
            for &(root, site, (offset, size)) in &self.sites[k] {
                bindings.push(match site {
                    Site::Arena(at) => self.arena_range(at + offset, size)?,
                    Site::Host => {
                        let a = self.host[root].ok_or_else(|| {
                            Error::invariant("a host site has an allocation", format!("{root}"))
                        })?;
                        let whole = self.upload.resolve(a.handle)?;
                        BlockRange {
                            offset: whole.offset + offset,
                            size,
                            ..whole
                        }
                    }
                });
            }
            // The last site is the output: the arena bytes it binds (a view's span of its root)
            // may still be read by a copy-out.
            let (output, inputs) = self.sites[k]
                .split_last()
                .ok_or_else(|| Error::invariant("an op binds its output", format!("op {k}")))?;
            let writes: &[(u64, u64)] = match *output {
                (_, Site::Arena(at), (offset, size)) => &[(at + offset, size)],
                (_, Site::Host, _) => &[],
            };
            // The output's root joins its copy-in too: a kernel that writes one part of a tensor
            // (a tiled chain's view) must not race the copy bringing back its other parts.
            let roots = inputs.iter().chain(std::iter::once(output)).map(|s| s.0);
            lanes.before_compute(b, roots, writes)?;
            if let Some(trace) = &self.trace {
                for (i, &(root, site, (_, size))) in self.sites[k].iter().enumerate() {
                    let access = if i + 1 < self.sites[k].len() {
                        Access::Read
                    } else {
                        Access::Write
                    };
                    trace.bind(
                        &node.label,
                        root,
                        matches!(site, Site::Arena(_)),
                        size,
                        access,
                    );
                }
            }
            let op = self.gather_at[k].map_or(&node.op, |gi| &self.gathers[gi].op);
            last = b.dispatch(op, &bindings)?;
            for &(t, offset) in &self.leave[k] {
                let size = self.sizes[t];
                let src = self.arena_range(offset, size)?;
                let s = self.slot[t].ok_or_else(|| {
                    Error::invariant("a swapped tensor has a slot", format!("{t}"))
                })?;
                let dst = self.readback.resolve(s.handle)?;
                self.out_ticket[t] = lanes.copy_out(b, &mut last, offset, src, dst)?;
                self.report.bytes_to_host += size;
                if let Some(trace) = &self.trace {
                    trace.copy_out(t, size);
                }
            }
            if let Some(trace) = &mut self.trace {
                trace.close(k);
            }
        }
        if let Some(j) = lanes.finish(b)? {
            last = j;
        }
        if let Some(a) = self.arena {
            self.device.mark_used(a.handle, last)?;
        }
        self.last = last;
        self.report.last_stall = stall;
        Ok(last)
    }

    /// After the run's last ticket completed: adds the compute lane's device-side waits for the
    /// transfer lane during the run to the reported stall, where the backend measures them.
    pub(in crate::runtime::model) fn finish(&mut self, rt: &Runtime) {
        let measured = self
            .stall_mark
            .take()
            .zip(lanes::of(rt.backend().as_ref()).transfer_stall());
        if let Some((before, now)) = measured {
            self.report.last_stall += now.saturating_sub(before);
        }
        self.report.lane_waits_measured = measured.is_some() && self.report.transfer_lane;
    }
}

impl Offloaded {
    /// Whether a run waits on the host (a swap-in read back and staged, or a lookup's rows
    /// staged): such a run needs [`Model::run_async`](crate::Model::run_async) on `wasm32`, where
    /// nothing may block; every other budgeted run only enqueues.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(in crate::runtime::model) fn waits_on_host(&self) -> bool {
        self.arrive
            .iter()
            .flatten()
            .any(|&(_, _, arrival)| match arrival {
                Arrival::SwapIn => !self.direct_swap_in,
                Arrival::HostWrite => true,
                Arrival::Prefetch | Arrival::InPlace | Arrival::Recompute { .. } => false,
            })
    }
}

/// The lane state of one run: where each copy goes and which joins the compute lane needs.
/// Public under `test-support` (as `tensormem::OffloadLanes`) so that the conformance suite
/// drives the executor's copy paths on every backend.
pub struct RunLanes {
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
    pub fn new(backend: &dyn Backend, on: bool, roots: usize) -> Self {
        RunLanes {
            on: on && lanes::of(backend).transfer_lane() == TransferLane::Concurrent,
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
            lanes::of(backend).transfer_after(*last)?;
            self.ordered_after = *last;
        }
        let t = lanes::of(backend).transfer_copy(src, dst)?;
        self.issued = t;
        Ok(t)
    }

    /// A copy into root tensor `root`'s arena range `dst`.
    pub fn copy_in(
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

    /// A swap-in that is one device copy: root tensor `root` comes back from its host slot
    /// `src` into its arena range `dst`, after its copy-out `out` (from [`RunLanes::copy_out`])
    /// wrote the slot. That order is the lane's own, and nothing else gives it (the arena bytes
    /// the copy-out read may be joined much later or never): the copy-out is an earlier copy on
    /// the same lane, or with the lane off earlier work on the compute queue, so the swap-in
    /// goes where its copy-out went. Kernels reading the tensor join it as any copy-in.
    ///
    /// # Errors
    /// [`Error::InvariantViolated`] when `out` was not issued on this run's lane; the backend's.
    pub fn swap_in(
        &mut self,
        backend: &dyn Backend,
        last: &mut Ticket,
        root: usize,
        src: BlockRange,
        dst: BlockRange,
        out: TransferTicket,
    ) -> Result<()> {
        let issued = if self.on {
            self.issued
        } else {
            TransferTicket(last.0)
        };
        if out == TransferTicket::DONE || out > issued {
            return Err(Error::invariant(
                "a swap-in follows its copy-out on the same lane",
                format!("copy-out ticket {} (issued {})", out.0, issued.0),
            ));
        }
        self.copy_in(backend, last, root, src, dst)
    }

    /// A copy out of the arena at `offset` (`src`) into its host slot; returns the ticket the host
    /// waits for before reading the slot.
    pub fn copy_out(
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

    /// Before compute work that binds the tensors `reads` (roots it reads or writes part of) and
    /// writes the arena ranges `writes` (offset, size): joins the copies it depends on (the
    /// compute work's own ticket then covers the join).
    pub fn before_compute(
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
    pub fn finish(&mut self, backend: &dyn Backend) -> Result<Option<Ticket>> {
        let issued = self.issued;
        self.join(backend, issued)
    }

    /// Waits on the host, in `waiting`'s mode, for transfer `ticket` (a copy-out the host reads
    /// back).
    async fn wait(
        &self,
        waiting: Waiting,
        backend: &dyn Backend,
        ticket: TransferTicket,
    ) -> Result<()> {
        if self.on {
            waiting.transfer(backend, ticket).await
        } else {
            waiting.ticket(backend, Ticket(ticket.0)).await
        }
    }

    fn join(&mut self, backend: &dyn Backend, need: TransferTicket) -> Result<Option<Ticket>> {
        if need <= self.joined {
            return Ok(None);
        }
        let joined = lanes::of(backend).compute_after(need)?;
        self.joined = need;
        self.leaving.retain(|l| l.2 > need);
        Ok(Some(joined))
    }
}

/// A tensor's name for its residencies in the trace (staged tensors past the graph's: `staged`).
fn tensor_name(graph: &crate::Graph, t: usize) -> String {
    graph
        .tensors()
        .get(t)
        .map_or_else(|| format!("staged {t}"), |d| d.name.clone())
}

/// The copy an arrival is in the trace (`None`: an upload from the host).
fn transfer_kind(arrival: Arrival) -> Option<TransferKind> {
    match arrival {
        Arrival::Prefetch => Some(TransferKind::Prefetch),
        Arrival::SwapIn => Some(TransferKind::SwapIn),
        Arrival::HostWrite | Arrival::InPlace | Arrival::Recompute { .. } => None,
    }
}
