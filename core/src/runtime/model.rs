//! `Model`: a graph compiled against a runtime — liveness, a static plan of its intermediates in one
//! arena, weights bound in the runtime's store (shared with every other model), and execution.

use std::time::Duration;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{BlockRange, Ticket, Waiting};
use crate::graph::{Graph, TensorId, TensorKind};
use crate::numa::HostPlacement;
use crate::ops::DType;
use crate::plan::{self, OpUses, SolveOptions, TensorRole};
use crate::pool::{Allocation, AllocationStats};
use crate::runtime::Runtime;
use crate::runtime::segments::{self, Segments, segment_ranges};
use crate::runtime::tensor::{Element, check_element};
use crate::runtime::weights::{WeightHasher, WeightKey, WeightStoreReport};
use crate::time::Instant;
use crate::trace::{Access, EventKind, Tracer};
use crate::{Error, Result};

mod offloaded;

pub use offloaded::{CompileDesc, OffloadReport};

/// Bytes per upload call when a weight streams in ([`Model::set_weight_chunks`] cuts a whole
/// slice into pieces of this size): the staging belt moves a piece at a time, so a caller whose
/// source is a memory-mapped file can release each piece's pages as it goes.
pub const WEIGHT_CHUNK_BYTES: usize = 4 << 20;

/// What a compiled model costs in memory, and what its plan saved. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryReport {
    /// Bytes of the weights this model reads (held once in the runtime's store, however many
    /// models read them).
    pub weight_bytes: u64,
    /// `weight_bytes` per element type (f32, f16, i8 ...), in [`DType`] declaration order.
    pub weight_bytes_by_dtype: Vec<(DType, u64)>,
    /// The runtime's weight store as of [`Model::memory_report`]: device bytes held for every
    /// model of the runtime, each weight once.
    pub weight_store: WeightStoreReport,
    /// Bytes of graph inputs and outputs (persistent per model).
    pub io_bytes: u64,
    /// Bytes the weights, inputs and outputs occupy beyond their sizes: each is its own
    /// allocation, rounded up to the backend's binding alignment (256 bytes on CUDA), so a small
    /// model's device need is more than the sum of its tensors. Zero for a budgeted model, whose
    /// plan places every tensor, padding included.
    pub padding_bytes: u64,
    /// Size of the planned activation arena: the plan's peak.
    pub activation_planned_bytes: u64,
    /// Sum of all intermediate sizes: the arena without reuse.
    pub activation_no_reuse_bytes: u64,
    /// Max over time of live intermediate bytes: no plan can do better.
    pub activation_lower_bound_bytes: u64,
    /// Peak of the greedy-by-size baseline plan.
    pub activation_greedy_bytes: u64,
    /// Which planner produced the plan.
    pub plan_algorithm: String,
    /// Intermediate buffers planned.
    pub planned_buffers: usize,
    /// Device-pool blocks allocated since the runtime was created.
    pub device_blocks_allocated: u64,
    /// Staging blocks allocated since the runtime was created.
    pub staging_blocks_allocated: u64,
    /// Bytes moved through the staging belt since the runtime was created (both directions).
    pub staging_bytes_moved: u64,
    /// The device pool's allocation counters, the runtime's as a whole (`None` when
    /// [`PoolConfig::statistics`](crate::PoolConfig::statistics) is off).
    pub device_allocations: Option<AllocationStats>,
    /// Completed runs of this model.
    pub runs: u64,
    /// Wall time of the last [`Model::run`] (enqueue to completion), or of the last
    /// [`Model::enqueue`] alone.
    pub last_run: Duration,
    /// Highest bytes the runtime's device pool has reserved from the backend (measured by the
    /// pool, all models of the runtime together); for a budgeted model, its own pool's.
    pub peak_device_bytes: u64,
    /// Highest bytes the same pool had handed out to live allocations (each rounded to the copy
    /// alignment): `peak_device_bytes` divided by this is what the pool's policy cost at its
    /// peak (fragmentation and growth slack).
    pub peak_device_live_bytes: u64,
    /// Device bytes reserved in the runtime's account as of the report: the runtime's pools, its
    /// staging belt and the arenas of its budgeted models.
    pub runtime_reserved_bytes: u64,
    /// The runtime's device-memory limit, if any.
    pub runtime_limit: Option<u64>,
    /// The offload schedule and its traffic, for a model compiled with a device budget
    /// ([`Runtime::compile_with`]).
    pub offload: Option<OffloadReport>,
    /// Where the runtime's host memory lives (the staging belt's and host-visible pools' blocks,
    /// all from the one backend): the NUMA node they are bound to, or why none
    /// ([`Backend::host_placement`](crate::Backend::host_placement)).
    pub host_memory: HostPlacement,
}

/// Where a root tensor's bytes are: an allocation and an offset in it.
#[derive(Copy, Clone, Debug)]
struct Place {
    /// The allocation (the first segment's, for a tensor held in segments).
    alloc: Allocation,
    offset: u64,
    size: u64,
    /// Planned inside the activation arena (traced as a virtual allocation).
    planned: bool,
    /// For a tensor larger than one block: its segments, in [`Model::segmented`] (offset 0).
    segmented: Option<usize>,
}

/// A compiled graph. Dropping it frees its allocations (after in-flight work).
pub struct Model {
    rt: Runtime,
    graph: Graph,
    /// Indexed by root tensor id; `None` for alias ids and for weights not bound yet.
    places: Vec<Option<Place>>,
    owned: Vec<Allocation>,
    /// Indexed by root tensor id: the store entry a weight is bound to.
    weight_keys: Vec<Option<WeightKey>>,
    /// The segments of tensors larger than one block (weights, inputs, outputs, and
    /// intermediates, which are then not planned), indexed by [`Place::segmented`].
    segmented: Vec<Segments>,
    /// Allocation alignment of every tensor of this model.
    align: u64,
    report: MemoryReport,
    /// The per-run program of a model compiled with a device budget.
    offload: Option<Box<offloaded::Offloaded>>,
}

/// Every op of `graph` runs within the device's largest binding (its operands fit, or the
/// validating front splits it into parts that do), and every view it binds starts on the device's
/// `binding_align`.
///
/// # Errors
/// [`Error::Misaligned`] for a view off `binding_align`; [`Error::TooLarge`] naming the op's
/// largest operand.
fn check_bindings(graph: &Graph, caps: &crate::Capabilities) -> Result<()> {
    for node in graph.nodes() {
        for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
            let offset = graph.decl(t)?.offset;
            if caps.binding_align > 1 && !offset.is_multiple_of(caps.binding_align) {
                return Err(Error::Misaligned {
                    what: "offset of a graph view an op binds",
                    value: offset,
                    align: caps.binding_align,
                    align_name: "binding_align",
                });
            }
        }
        if !crate::validate::split::fits(&node.op, caps.max_binding_size, caps.binding_align) {
            let sig = node.op.signature()?;
            let largest = sig
                .inputs
                .iter()
                .chain(&sig.outputs)
                .map(|o| o.size())
                .max();
            return Err(Error::TooLarge {
                what: "tensor binding of an op that cannot be split",
                requested: largest.unwrap_or(0),
                limit: caps.max_binding_size,
                limit_name: "max_binding_size",
            });
        }
    }
    Ok(())
}

/// Every op over a tensor held in segments (`segmented`, by tensor index) can be cut into parts
/// that each bind within one segment, as [`Runtime::dispatch`] would cut it.
///
/// # Errors
/// [`Error::SegmentedOperand`] naming the op and operand, at compile time rather than at the
/// first run.
fn check_segmented(graph: &Graph, caps: &crate::Capabilities, segmented: &[bool]) -> Result<()> {
    for node in graph.nodes() {
        let ids: Vec<TensorId> = node
            .inputs
            .iter()
            .copied()
            .chain(std::iter::once(node.output))
            .collect();
        if !ids.iter().any(|&t| segmented[graph.root(t).index()]) {
            continue;
        }
        let decls = ids
            .iter()
            .map(|&t| graph.decl(graph.root(t)))
            .collect::<Result<Vec<_>>>()?;
        let operands = decls
            .iter()
            .map(|d| Ok((d.dtype, d.shape.as_slice(), d.size()?)))
            .collect::<Result<Vec<_>>>()?;
        segments::check_cuttable(caps, &node.op, &operands)?;
    }
    Ok(())
}

impl Runtime {
    /// Compiles `graph`: computes lifetimes, plans every intermediate into one arena, and allocates
    /// weights, inputs, outputs and the arena from the device pool.
    ///
    /// A tensor larger than the device's largest block is held in segments (as
    /// [`Runtime::alloc`] holds one): a weight, input or output in its own segments, and an
    /// intermediate too, outside the planned arena (which is one block), so it is not reused.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an ill-formed graph (a tensor read before it is written),
    /// [`Error::ForeignTensor`] for an output of another graph, [`Error::ArithmeticOverflow`] for a
    /// shape whose size overflows, an operand beyond the device's largest binding
    /// ([`Error::TooLarge`]), an op that cannot be cut over a tensor held in segments
    /// ([`Error::SegmentedOperand`]), allocation errors.
    pub fn compile(&self, graph: &Graph) -> Result<Model> {
        let caps = self.backend().capabilities();
        let copy_align = caps.copy_align.max(1);
        let align = caps.binding_align.max(copy_align).next_power_of_two();
        let tensors = graph.tensors();
        let is_output: Vec<bool> = {
            let mut v = vec![false; tensors.len()];
            for &o in graph.outputs() {
                graph.decl(o)?; // an output id of another graph (defect 4: was an index panic)
                v[graph.root(o).index()] = true;
            }
            v
        };
        let sizes: Vec<u64> = tensors
            .iter()
            .map(|t| {
                let size = t.size()?;
                size.checked_next_multiple_of(copy_align)
                    .ok_or_else(|| Error::ArithmeticOverflow {
                        what: format!("padded byte size of '{}'", t.name),
                        limit_name: "u64",
                    })
            })
            .collect::<Result<_>>()?;
        // A tensor larger than one block is held in segments; an intermediate one gets its own,
        // like an output, instead of a place in the (one-block) planned arena.
        let segmented: Vec<bool> = tensors
            .iter()
            .map(|t| Ok(segments::segment_sizes(caps, t.dtype, &t.shape, t.size()?)?.len() > 1))
            .collect::<Result<_>>()?;
        let roles: Vec<TensorRole> = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| match t.kind {
                TensorKind::Input => TensorRole::Input,
                TensorKind::Weight => TensorRole::Persistent,
                TensorKind::Intermediate if is_output[i] || segmented[i] => TensorRole::Output,
                TensorKind::Intermediate => TensorRole::Intermediate,
            })
            .collect();
        check_segmented(graph, caps, &segmented)?;
        check_bindings(graph, caps)?;
        let uses: Vec<OpUses> = graph
            .nodes()
            .iter()
            .map(|n| OpUses {
                reads: n.inputs.iter().map(|&i| graph.root(i).index()).collect(),
                writes: vec![graph.root(n.output).index()],
                in_place: None,
            })
            .collect();
        let live = plan::liveness(&roles, &sizes, &uses, align)?;
        let solution = plan::solve(
            &live.buffers,
            &SolveOptions {
                time_limit: self.config().plan_time_limit,
                ..SolveOptions::default()
            },
        )?;
        let plan = solution.plan.ok_or_else(|| {
            self.front().mark_broken(Error::invariant(
                "the planner always returns a plan when no capacity is set",
                "plan::solve returned none",
            ))
        })?;
        let mut report = MemoryReport {
            activation_planned_bytes: plan.peak,
            activation_no_reuse_bytes: live.buffers.iter().map(|b| b.size).sum(),
            activation_lower_bound_bytes: solution.lower_bound,
            activation_greedy_bytes: solution.greedy_peak,
            plan_algorithm: solution.algorithm.clone(),
            planned_buffers: live.buffers.len(),
            ..MemoryReport::default()
        };

        let mut model = Model {
            rt: self.clone(),
            graph: graph.clone(),
            places: vec![None; tensors.len()],
            owned: Vec::new(),
            weight_keys: vec![None; tensors.len()],
            segmented: Vec::new(),
            align,
            report: MemoryReport::default(),
            offload: None,
        };
        let pool = self.device_pool();
        let arena = if plan.peak > 0 {
            let a = pool.allocate(plan.peak, align, "activations (planned arena)")?;
            model.owned.push(a);
            Some(a)
        } else {
            None
        };
        for (i, t) in tensors.iter().enumerate() {
            if t.alias_of.is_some() {
                continue;
            }
            let place = match (roles[i], live.buffer_of[i], arena) {
                (TensorRole::Intermediate, Some(b), Some(arena)) => Place {
                    alloc: arena,
                    offset: plan.offsets[b],
                    size: sizes[i],
                    planned: true,
                    segmented: None,
                },
                (TensorRole::Intermediate, _, _) => continue, // never written nor read
                (TensorRole::Persistent, _, _) => {
                    // Bound to the store by `set_weight`, which knows the bytes.
                    report.weight_bytes += sizes[i];
                    report.padding_bytes += sizes[i].next_multiple_of(align) - sizes[i];
                    match report
                        .weight_bytes_by_dtype
                        .iter_mut()
                        .find(|(d, _)| *d == t.dtype)
                    {
                        Some((_, b)) => *b += sizes[i],
                        None => report.weight_bytes_by_dtype.push((t.dtype, sizes[i])),
                    }
                    continue;
                }
                _ if segmented[i] => {
                    let segs = self.alloc_segments(t.dtype, &t.shape, t.size()?, align, &t.name)?;
                    model.owned.extend_from_slice(segs.allocs());
                    report.io_bytes += sizes[i];
                    model.segmented.push(segs);
                    Place {
                        alloc: model.segmented[model.segmented.len() - 1].first(),
                        offset: 0,
                        size: sizes[i],
                        planned: false,
                        segmented: Some(model.segmented.len() - 1),
                    }
                }
                _ => {
                    let a = pool.allocate(sizes[i], align, &t.name)?;
                    model.owned.push(a);
                    report.io_bytes += sizes[i];
                    report.padding_bytes += sizes[i].next_multiple_of(align) - sizes[i];
                    Place {
                        alloc: a,
                        offset: 0,
                        size: sizes[i],
                        planned: false,
                        segmented: None,
                    }
                }
            };
            model.places[i] = Some(place);
        }
        report.weight_bytes_by_dtype.sort_by_key(|(d, _)| *d as u8);
        model.report = report;
        Ok(model)
    }
}

impl Model {
    /// Where `t`'s bytes are: its allocation and the offset in it (a device set copies between
    /// models' tensors through it).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a tensor held in segments (larger than one block).
    pub(crate) fn location(&self, t: TensorId) -> Result<(Allocation, u64)> {
        let p = self.place(t)?;
        if p.segmented.is_some() {
            return Err(Error::Unsupported {
                backend: self.rt.backend().capabilities().backend,
                what: format!(
                    "copying tensor {} between devices: it is larger than one block, held in \
                     segments",
                    t.index()
                ),
            });
        }
        Ok((p.alloc, p.offset))
    }

    /// The segments of a place held in segments.
    fn segments_of(&self, p: &Place) -> Option<&Segments> {
        p.segmented.and_then(|i| self.segmented.get(i))
    }

    /// Where `t`'s bytes are: its root's place, narrowed to `t`'s range for a view.
    fn place(&self, t: TensorId) -> Result<Place> {
        self.graph.decl(t)?;
        let root = self.graph.root(t);
        let p = self.root_place(root)?;
        let (offset, size) = span(&self.graph, t, p.size)?;
        Ok(Place {
            offset: p.offset + offset,
            size,
            ..p
        })
    }

    fn root_place(&self, root: TensorId) -> Result<Place> {
        self.places
            .get(root.index())
            .copied()
            .flatten()
            .ok_or_else(|| match self.graph.decl(root) {
                Ok(d) if d.kind == TensorKind::Weight => Error::invalid(format!(
                    "weight '{}' is not set: upload it with Model::set_weight before running",
                    d.name
                )),
                _ => Error::invalid(format!(
                    "tensor {} has no storage in this model (never written nor read)",
                    root.index()
                )),
            })
    }

    async fn set(
        &mut self,
        waiting: Waiting,
        t: TensorId,
        kind: TensorKind,
        data: &[u8],
    ) -> Result<Ticket> {
        let decl = self.graph.decl(t)?;
        if decl.kind != kind {
            return Err(Error::invalid(format!(
                "'{}' is a {:?}, not a {kind:?}",
                decl.name, decl.kind
            )));
        }
        let size = decl.size()?;
        if data.len() as u64 != size {
            return Err(Error::SizeMismatch {
                what: format!("data for '{}' {:?}", decl.name, decl.shape),
                expected: size,
                actual: data.len() as u64,
            });
        }
        let root = self.graph.decl(self.graph.root(t))?;
        if decl.offset != 0 || size != root.size()? {
            return Err(Error::invalid(format!(
                "'{}' is a view of part of '{}': the host sets the whole tensor",
                decl.name, root.name
            )));
        }
        if let Some(o) = &mut self.offload {
            return o.write(&self.rt, self.graph.root(t).index(), data);
        }
        let p = self.place(t)?;
        if let Some(segs) = self.segments_of(&p) {
            return self.rt.write_segments(waiting, segs, size, 0, data).await;
        }
        self.rt
            .write_bytes_with(waiting, p.alloc, p.offset, data)
            .await
    }

    /// Binds weight `t` to `data` through the runtime's store: when a model of this runtime
    /// already bound equal bytes under the same name, `t` shares them and nothing is uploaded;
    /// otherwise they are uploaded once. Weights persist across runs. Setting a bound weight again
    /// rebinds it (the old bytes are released, never overwritten under another model). Native
    /// only; see [`Model::set_weight_async`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `t` is not a weight, [`Error::SizeMismatch`], transfer and
    /// allocation errors (the weight keeps its previous binding).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        let mut h = WeightHasher::new();
        h.update(data);
        self.set_weight_hashed(t, h.finish(), data)
    }

    /// [`Model::set_weight`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    pub async fn set_weight_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        let mut h = WeightHasher::new();
        h.update(data);
        let (hash, size) = (h.finish(), data.len() as u64);
        self.set_weight_with(
            Waiting::Async,
            t,
            hash,
            size,
            data.chunks(WEIGHT_CHUNK_BYTES),
        )
        .await
    }

    /// [`Model::set_weight`] with the bytes' [`content_hash`](crate::runtime::content_hash)
    /// computed by the caller (a loader that hashed the file once binds a second model's weights
    /// without reading them again). A wrong hash does not corrupt other weights, but two different
    /// byte strings given one hash under one name would share the first one's bytes.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight_hashed(&mut self, t: TensorId, hash: u64, data: &[u8]) -> Result<Ticket> {
        self.set_weight_chunks(t, hash, data.len() as u64, data.chunks(WEIGHT_CHUNK_BYTES))
    }

    /// [`Model::set_weight_hashed`] from a source that yields the `size` bytes in order, in
    /// chunks whose lengths are multiples of the backend's copy alignment (all but the last; 4
    /// bytes on every backend). Each chunk is uploaded
    /// before the next is asked for, so the source (a memory-mapped file) can drop the pages it
    /// already handed out: a weight streams to the device without a host copy of the whole.
    /// Nothing is read when the store already holds the weight.
    ///
    /// # Errors
    /// As [`Model::set_weight`]; [`Error::SizeMismatch`] when the chunks do not add up to `size`
    /// or `size` is not the tensor's byte size; [`Error::Misaligned`] for a chunk boundary that is
    /// not a multiple of the copy alignment.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight_chunks<'a>(
        &mut self,
        t: TensorId,
        hash: u64,
        size: u64,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Ticket> {
        complete_now(self.set_weight_with(Waiting::Blocking, t, hash, size, chunks))
    }

    /// The one weight binding path, waiting in `waiting`'s mode.
    async fn set_weight_with<'a>(
        &mut self,
        waiting: Waiting,
        t: TensorId,
        hash: u64,
        size: u64,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Ticket> {
        let decl = self.graph.decl(t)?;
        if decl.kind != TensorKind::Weight {
            return Err(Error::invalid(format!(
                "'{}' is a {:?}, not a Weight",
                decl.name, decl.kind
            )));
        }
        let expected = decl.size()?;
        if size != expected {
            return Err(Error::SizeMismatch {
                what: format!("data for '{}' {:?}", decl.name, decl.shape),
                expected,
                actual: size,
            });
        }
        if self.offload.is_some() {
            // A budgeted model keeps its weights in its own arena or host masters (the schedule
            // streams them), not in the runtime's shared store.
            let mut data = Vec::with_capacity(size as usize);
            for chunk in chunks {
                data.extend_from_slice(chunk);
            }
            return self.set(waiting, t, TensorKind::Weight, &data).await;
        }
        let root = self.graph.root(t).index();
        let key = WeightKey {
            name: decl.name.clone(),
            dtype: decl.dtype,
            size,
            hash,
        };
        if self.weight_keys[root].as_ref() == Some(&key) {
            return Ok(Ticket::DONE);
        }
        let copy_align = self.rt.backend().capabilities().copy_align.max(1);
        let padded =
            size.checked_next_multiple_of(copy_align)
                .ok_or_else(|| Error::ArithmeticOverflow {
                    what: format!("padded byte size of '{}'", key.name),
                    limit_name: "u64",
                })?;
        let rt = self.rt.clone();
        let mut last = Ticket::DONE;
        let segs = match rt.share_weight(&key) {
            Some(segs) => segs,
            None => {
                let segs =
                    rt.alloc_segments(decl.dtype, &decl.shape, size, self.align, &key.name)?;
                let uploaded =
                    upload_chunks(&rt, waiting, &segs, &key.name, size, copy_align, chunks).await;
                match uploaded {
                    Ok(t) => last = t,
                    Err(e) => {
                        rt.discard_weight(&segs);
                        return Err(e);
                    }
                }
                rt.store_weight(&key, segs, padded)?
            }
        };
        if let Some(old) = self.weight_keys[root].replace(key) {
            self.rt.release_weight(&old)?;
        }
        let segmented = (segs.allocs().len() > 1).then(|| {
            self.segmented.push(segs.clone());
            self.segmented.len() - 1
        });
        self.places[root] = Some(Place {
            alloc: segs.first(),
            offset: 0,
            size: padded,
            planned: false,
            segmented,
        });
        Ok(last)
    }

    /// Uploads an input for the next run. Native only; see [`Model::set_input_async`].
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_input(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        complete_now(self.set(Waiting::Blocking, t, TensorKind::Input, data))
    }

    /// [`Model::set_input`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    pub async fn set_input_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        self.set(Waiting::Async, t, TensorKind::Input, data).await
    }

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
        let t = self.enqueue()?;
        waiting.ticket(self.rt.backend().as_ref(), t).await?;
        if let Some(o) = &mut self.offload {
            o.finish(&self.rt);
        }
        self.report.last_run = start.elapsed();
        Ok(t)
    }

    /// Enqueues every node without waiting. Returns the ticket of the last one.
    ///
    /// # Errors
    /// As [`Model::run`].
    pub fn enqueue(&mut self) -> Result<Ticket> {
        let start = Instant::now();
        if let Some(o) = &mut self.offload {
            let last = o.enqueue(&self.rt, &self.graph)?;
            self.report.runs += 1;
            self.report.last_run = start.elapsed();
            return Ok(last);
        }
        let pool = self.rt.device_pool();
        let mut ranges: Vec<Option<Vec<BlockRange>>> = vec![None; self.places.len()];
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
                        Some(segs) => {
                            segment_ranges(pool.as_ref(), segs, self.graph.decl(t)?.size()?)?
                        }
                        None => {
                            let base = pool.resolve(p.alloc.handle)?;
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
                &self.rt,
                root,
                decl.offset,
                bytemuck::cast_slice_mut(&mut out),
            )?;
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

    /// The memory report, with the runtime's block and staging counters as of now.
    pub fn memory_report(&self) -> MemoryReport {
        let mut r = self.report.clone();
        let dev = self.rt.device_pool().stats();
        let st = self.rt.staging().stats();
        r.device_blocks_allocated = dev.blocks_allocated;
        r.staging_blocks_allocated = st.blocks_allocated;
        r.staging_bytes_moved = st.uploaded + st.downloaded;
        r.device_allocations = self.rt.allocation_stats();
        (r.peak_device_bytes, r.peak_device_live_bytes) = match &self.offload {
            Some(o) => o.peak_device_bytes(),
            None => (dev.peak_reserved, dev.peak_in_use),
        };
        r.offload = self.offload.as_ref().map(|o| o.report.clone());
        r.runtime_reserved_bytes = self.rt.budget().reserved();
        r.runtime_limit = self.rt.budget().limit();
        r.weight_store = self.rt.weights().report();
        r.host_memory = self.rt.backend().host_placement();
        r
    }

    /// The graph this model was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The runtime this model runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        for a in self.owned.drain(..) {
            let _ = self.rt.device_pool().free(a.handle);
        }
        for key in self.weight_keys.drain(..).flatten() {
            let _ = self.rt.release_weight(&key);
        }
    }
}

/// Records one run's tensor uses, and the lifetimes of the tensors planned in the arena as virtual
/// allocations (pool `"<pool>/planned"`, child of the arena) from their first write to their last use.
struct NodeTracer {
    tracer: Tracer,
    pool: String,
    /// Per root tensor: trace id (owned allocations: the pool's; planned ones: issued at first write).
    ids: Vec<u64>,
    /// Per root tensor: first and last node that binds it.
    span: Vec<Option<(usize, usize)>>,
}

impl NodeTracer {
    fn new(model: &Model, tracer: Tracer) -> Result<Self> {
        let pool = model.rt.device_pool();
        let mut ids = vec![0; model.places.len()];
        let mut span: Vec<Option<(usize, usize)>> = vec![None; model.places.len()];
        for (step, node) in model.graph.nodes().iter().enumerate() {
            for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
                let root = model.graph.root(t).index();
                let s = span[root].get_or_insert((step, step));
                s.1 = step;
                if let Some(p) = model.places[root].filter(|p| !p.planned) {
                    ids[root] = model.rt.trace_id(p.alloc.handle);
                }
            }
        }
        Ok(NodeTracer {
            tracer,
            pool: format!("{}/planned", pool.name()),
            ids,
            span,
        })
    }

    fn before(&mut self, model: &Model, step: usize, node: &crate::graph::Node) -> Result<()> {
        let out = model.graph.root(node.output).index();
        if let Some(p) = model.places[out].filter(|p| p.planned) {
            if self.span[out].is_some_and(|s| s.0 == step) {
                self.ids[out] = self.tracer.next_id();
                self.tracer.record(EventKind::Alloc {
                    id: self.ids[out],
                    pool: self.pool.clone(),
                    size: p.size,
                    offset: p.offset,
                    label: node.label.clone(),
                    parent: Some(model.rt.trace_id(p.alloc.handle)),
                });
            }
        }
        for (i, &t) in node
            .inputs
            .iter()
            .chain(std::iter::once(&node.output))
            .enumerate()
        {
            let root = model.graph.root(t).index();
            self.tracer.record(EventKind::Use {
                id: self.ids[root],
                op: node.label.clone(),
                access: if i < node.inputs.len() {
                    Access::Read
                } else {
                    Access::Write
                },
                size: model.places[root].map_or(0, |p| p.size),
            });
        }
        Ok(())
    }

    fn after(&mut self, model: &Model, step: usize, node: &crate::graph::Node) {
        for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
            let root = model.graph.root(t).index();
            let planned = model.places[root].is_some_and(|p| p.planned);
            if planned && self.span[root].is_some_and(|s| s.1 == step) && self.ids[root] != 0 {
                self.tracer
                    .record(EventKind::FreeRequested { id: self.ids[root] });
                self.ids[root] = 0; // a tensor bound twice by its last node is freed once
            }
        }
    }
}

/// Where `t`'s binding lies in its root's storage of `root_size` (padded) bytes, as `(offset,
/// size)`: a root, or an alias of all of it, binds the whole padded root; a view binds its
/// elements rounded up to whole 32-bit words, as kernels bind every operand.
///
/// # Errors
/// [`Error::OutOfBounds`] for a view whose rounded binding passes the root's storage;
/// [`Error::ForeignTensor`], [`Error::ArithmeticOverflow`].
pub(crate) fn span(graph: &Graph, t: TensorId, root_size: u64) -> Result<(u64, u64)> {
    let decl = graph.decl(t)?;
    let size = decl.size()?;
    if decl.offset == 0 && size == graph.decl(graph.root(t))?.size()? {
        return Ok((0, root_size));
    }
    let words = size.checked_next_multiple_of(4).unwrap_or(u64::MAX);
    if decl.offset.saturating_add(words) > root_size {
        return Err(Error::OutOfBounds {
            what: "binding of a graph view",
            offset: decl.offset,
            size: words,
            limit: root_size,
        });
    }
    Ok((decl.offset, words))
}

/// Writes the `size` bytes `chunks` yield into `segs` in order (each boundary a multiple of
/// `copy_align`). Returns the latest ticket of the writes.
async fn upload_chunks<'a>(
    rt: &Runtime,
    waiting: Waiting,
    segs: &Segments,
    name: &str,
    size: u64,
    copy_align: u64,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Ticket> {
    let mut last = Ticket::DONE;
    let mut offset = 0u64;
    for chunk in chunks {
        if !offset.is_multiple_of(copy_align) {
            return Err(Error::Misaligned {
                what: "weight chunk offset",
                value: offset,
                align: copy_align,
                align_name: "copy_align",
            });
        }
        if offset + chunk.len() as u64 > size {
            return Err(Error::SizeMismatch {
                what: format!("streamed bytes of weight '{name}'"),
                expected: size,
                actual: offset + chunk.len() as u64,
            });
        }
        if !chunk.is_empty() {
            last = last.max(
                rt.write_segments(waiting, segs, size, offset, chunk)
                    .await?,
            );
        }
        offset += chunk.len() as u64;
    }
    if offset != size {
        return Err(Error::SizeMismatch {
            what: format!("streamed bytes of weight '{name}'"),
            expected: size,
            actual: offset,
        });
    }
    Ok(last)
}
