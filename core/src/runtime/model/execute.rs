//! Running a compiled model: enqueueing every node over its tensors' places (and the offload
//! schedule of a budgeted model), waiting for the run, and reading outputs back. Separate from
//! compilation, which decides the places this only reads.

use crate::backend::completion::complete_now;
use crate::backend::{BlockRange, Ticket, Waiting};
use crate::graph::TensorId;
use crate::pool::Lease;
use crate::runtime::segments::segment_ranges;
use crate::runtime::tensor::{Element, check_element};
use crate::time::Instant;
use crate::{Error, Result};

use super::Model;
use super::node_trace::NodeTracer;

impl Model {
    /// Enqueues every node, waits for completion, and returns the last ticket. Native only; see
    /// [`Model::run_async`].
    ///
    /// # Errors
    /// Backend errors ([`Error::DeviceLost`], ...), stale allocations.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(&mut self) -> Result<Ticket> {
        complete_now(self.run_with(Waiting::Blocking))
    }

    /// [`Model::run`] without blocking: the last node's ticket is awaited.
    ///
    /// # Errors
    /// As [`Model::run`].
    pub async fn run_async(&mut self) -> Result<Ticket> {
        self.run_with(Waiting::Async).await
    }

    async fn run_with(&mut self, waiting: Waiting) -> Result<Ticket> {
        let start = Instant::now();
        let t = self.enqueue_with(waiting).await?;
        waiting.ticket(self.rt.backend().as_ref(), t).await?;
        if let Some(o) = &mut self.offload {
            o.finish(&self.rt);
        }
        self.report.last_run = start.elapsed();
        Ok(t)
    }

    /// Enqueues every node without waiting for the run. Returns the ticket of the last one. A
    /// budgeted model whose schedule brings a tensor back through the host waits for that copy
    /// (blocking; on `wasm32` such a model is refused here and runs with [`Model::run_async`]).
    ///
    /// # Errors
    /// As [`Model::run`]; [`Error::Unsupported`] for that refusal.
    pub fn enqueue(&mut self) -> Result<Ticket> {
        #[cfg(not(target_arch = "wasm32"))]
        return complete_now(self.enqueue_with(Waiting::Blocking));
        #[cfg(target_arch = "wasm32")]
        {
            if self.offload.as_ref().is_some_and(|o| o.waits_on_host()) {
                return Err(Error::Unsupported {
                    backend: self.rt.backend().capabilities().backend,
                    what: "enqueueing a budgeted run that waits on the host (a swap-in read back \
                           through host memory, or a lookup's staged rows) on wasm32, where \
                           nothing may block: run it with Model::run_async"
                        .into(),
                });
            }
            // Nothing in such a run awaits, so its future completes on the first poll.
            complete_now(self.enqueue_with(Waiting::Async))
        }
    }

    /// Enqueues one run, a budgeted model's host waits in `waiting`'s mode.
    async fn enqueue_with(&mut self, waiting: Waiting) -> Result<Ticket> {
        if let Some(o) = &mut self.offload {
            let start = Instant::now();
            let last = o.enqueue(waiting, &self.rt, &self.graph).await?;
            self.report.runs += 1;
            self.report.last_run = start.elapsed();
            return Ok(last);
        }
        self.enqueue_planned()
    }

    /// Enqueues a run of an unbudgeted model: every node over its planned places.
    fn enqueue_planned(&mut self) -> Result<Ticket> {
        let start = Instant::now();
        let pool = self.rt.device_pool();
        let mut ranges: Vec<Option<Vec<BlockRange>>> = vec![None; self.places.len()];
        // Each range resolved below stays leased until the run's uses are recorded.
        let mut leases = Vec::new();
        let mut last = Ticket::DONE;
        let mut tracing = match self.rt.tracer() {
            Some(t) => Some(NodeTracer::new(self, t)?),
            None => None,
        };
        for (step, node) in self.graph.nodes().iter().enumerate() {
            if let Some(nt) = &mut tracing {
                nt.before(self, step, node)?;
            }
            for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
                if ranges[t.index()].is_none() {
                    let p = self.place(t)?;
                    ranges[t.index()] = Some(match self.segments_of(&p) {
                        // A view into a tensor held in segments is not bound (it would need
                        // its own cut of the segments).
                        Some(_)
                            if p.offset != 0
                                || p.size != self.root_place(self.graph.root(t))?.size =>
                        {
                            return Err(Error::Unsupported {
                                backend: self.rt.backend().capabilities().backend,
                                what: format!(
                                    "a view of tensor {}, which is held in segments",
                                    self.graph.root(t).index()
                                ),
                            });
                        }
                        Some(segs) => segment_ranges(
                            pool.as_ref(),
                            segs,
                            self.graph.decl(t)?.size()?,
                            &mut leases,
                        )?,
                        None => {
                            let (base, lease) = Lease::resolve(pool.as_ref(), p.alloc.handle)?;
                            leases.push(lease);
                            vec![BlockRange {
                                block: base.block,
                                offset: base.offset + p.offset,
                                size: p.size,
                            }]
                        }
                    });
                }
            }
            let operands: Vec<&[BlockRange]> = node
                .inputs
                .iter()
                .chain(std::iter::once(&node.output))
                .map(|&t| ranges[t.index()].as_deref().unwrap_or(&[]))
                .collect();
            last = self.rt.front().dispatch_segments(&node.op, &operands)?;
            if let Some(nt) = &mut tracing {
                nt.after(self, step, node);
            }
        }
        for a in &self.owned {
            pool.mark_used(a.handle, last)?;
        }
        for (place, key) in self.places.iter().zip(&self.weight_keys) {
            if let (Some(p), Some(_)) = (place, key) {
                match self.segments_of(p) {
                    Some(segs) => {
                        for a in segs.allocs() {
                            pool.mark_used(a.handle, last)?;
                        }
                    }
                    None => pool.mark_used(p.alloc.handle, last)?,
                }
            }
        }
        self.report.runs += 1;
        self.report.last_run = start.elapsed();
        Ok(last)
    }

    /// Downloads an output, an input or a weight as elements of `T` (the tensor's dtype, or `u8`
    /// for its raw bytes). Native only; see [`Model::read_output_async`].
    ///
    /// # Errors
    /// [`Error::NotAnOutput`] for an intermediate (the plan reuses its bytes, so after the run they
    /// hold another tensor), [`Error::ForeignTensor`], [`Error::DTypeMismatch`], transfer errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_output<T: Element>(&self, t: TensorId) -> Result<Vec<T>> {
        complete_now(self.read_output_with(Waiting::Blocking, t))
    }

    /// [`Model::read_output`] without blocking.
    ///
    /// # Errors
    /// As [`Model::read_output`].
    pub async fn read_output_async<T: Element>(&self, t: TensorId) -> Result<Vec<T>> {
        self.read_output_with(Waiting::Async, t).await
    }

    async fn read_output_with<T: Element>(&self, waiting: Waiting, t: TensorId) -> Result<Vec<T>> {
        let decl = self.graph.decl(t)?;
        check_element::<T>(decl.dtype, || format!("read of '{}'", decl.name))?;
        let elem = std::mem::size_of::<T>() as u64;
        if let Some(o) = &self.offload {
            let mut out = vec![T::zeroed(); (decl.size()? / elem) as usize];
            let root = self.graph.root(t).index();
            o.read(
                waiting,
                &self.rt,
                root,
                decl.offset,
                bytemuck::cast_slice_mut(&mut out),
            )
            .await?;
            return Ok(out);
        }
        let p = self.place(t)?;
        if p.planned {
            return Err(Error::NotAnOutput {
                tensor: t.index(),
                name: decl.name.clone(),
            });
        }
        let size = decl.size()?;
        let mut out = vec![T::zeroed(); (size / elem) as usize];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        match self.segments_of(&p) {
            Some(segs) => self.rt.read_segments(waiting, segs, size, 0, bytes).await?,
            None => {
                self.rt
                    .read_bytes_with(waiting, p.alloc, p.offset, bytes)
                    .await?;
            }
        }
        Ok(out)
    }
}
