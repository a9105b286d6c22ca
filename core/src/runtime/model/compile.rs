//! [`Runtime::compile`]: a graph's liveness, its static plan, and the allocation of every tensor it
//! places, with the checks that refuse at compile time what could not run. Separate from running
//! a model because it happens once per model and owns all of the planning.

use crate::graph::{Graph, TensorId, TensorKind};
use crate::plan::{self, OpUses, SolveOptions, TensorRole};
use crate::runtime::Runtime;
use crate::runtime::segments;
use crate::{Error, Result};

use super::{MemoryReport, Model, Place};

/// Every op of `graph` runs within the device's largest binding (its operands fit, or the
/// validating front splits it into parts that do), and every view it binds starts on the device's
/// `binding_align`.
///
/// # Errors
/// [`Error::Misaligned`] for a view off `binding_align`; [`Error::TooLarge`] naming the op's
/// largest operand.
pub(super) fn check_bindings(graph: &Graph, caps: &crate::Capabilities) -> Result<()> {
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
            let largest = sig.operands().map(|o| o.size()).max();
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
    /// What [`Runtime::compile`] would place, without allocating anything: the memory report of
    /// the unbudgeted model (the device bytes a percentage budget is a percentage of,
    /// [`MemoryReport::unbudgeted_device_bytes`]).
    ///
    /// # Errors
    /// As [`Runtime::compile`], less the allocation errors.
    pub fn memory_need(&self, graph: &Graph) -> Result<MemoryReport> {
        Ok(self.layout(graph)?.report)
    }

    /// The planning half of [`Runtime::compile`].
    fn layout(&self, graph: &Graph) -> Result<Layout> {
        let caps = self.backend().capabilities();
        let copy_align = caps.copy_align.max(1);
        let align = caps.binding_align.max(copy_align).next_power_of_two();
        let tensors = graph.tensors();
        let is_output: Vec<bool> = {
            let mut v = vec![false; tensors.len()];
            for &o in graph.outputs() {
                graph.decl(o)?; // an output id of another graph: an error, not an index panic
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
        let report = MemoryReport {
            activation_planned_bytes: plan.peak,
            activation_no_reuse_bytes: live.buffers.iter().map(|b| b.size).sum(),
            activation_lower_bound_bytes: solution.lower_bound,
            activation_greedy_bytes: solution.greedy_peak,
            plan_algorithm: solution.algorithm.clone(),
            planned_buffers: live.buffers.len(),
            ..MemoryReport::default()
        };
        let mut layout = Layout {
            align,
            sizes,
            segmented,
            roles,
            buffer_of: live.buffer_of,
            offsets: plan.offsets,
            report,
        };
        layout.count_bytes(graph);
        Ok(layout)
    }

    /// Compiles `graph`: computes lifetimes, plans every intermediate into one arena, and allocates
    /// weights, inputs, outputs and the arena from the device pool.
    ///
    /// A tensor larger than the device's largest block is held in segments (as
    /// [`Runtime::alloc`] holds one): a weight, input or output in its own segments, and an
    /// intermediate too, outside the planned arena (which is one block), so it is not reused.
    ///
    /// # Errors
    /// [`ArgumentError::ReadBeforeWrite`](crate::ArgumentError) for a tensor read before it is
    /// written, [`Error::ForeignTensor`] for an output of another graph,
    /// [`Error::ArithmeticOverflow`] for a shape whose size overflows, an operand beyond the
    /// device's largest binding ([`Error::TooLarge`]), an op that cannot be cut over a tensor held
    /// in segments ([`Error::SegmentedOperand`]), allocation errors.
    pub fn compile(&self, graph: &Graph) -> Result<Model> {
        let Layout {
            align,
            sizes,
            segmented,
            roles,
            buffer_of,
            offsets,
            report,
        } = self.layout(graph)?;
        let tensors = graph.tensors();
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
        let peak = report.activation_planned_bytes;
        let arena = if peak > 0 {
            let a = pool.allocate(peak, align, "activations (planned arena)")?;
            model.owned.push(a);
            // Runs resolve it: the lease of `allocate` is not needed.
            pool.release(a.handle)?;
            Some(a)
        } else {
            None
        };
        for (i, t) in tensors.iter().enumerate() {
            if t.alias_of.is_some() {
                continue;
            }
            let place = match (roles[i], buffer_of[i], arena) {
                (TensorRole::Intermediate, Some(b), Some(arena)) => Place {
                    alloc: arena,
                    offset: offsets[b],
                    size: sizes[i],
                    planned: true,
                    segmented: None,
                },
                (TensorRole::Intermediate, _, _) => continue, // never written nor read
                // Bound to the store by `set_weight`, which knows the bytes.
                (TensorRole::Persistent, _, _) => continue,
                _ if segmented[i] => {
                    let segs = self.alloc_segments(t.dtype, &t.shape, t.size()?, align, &t.name)?;
                    model.owned.extend_from_slice(segs.allocs());
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
                    pool.release(a.handle)?;
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
        model.report = report;
        Ok(model)
    }
}

/// A graph's placement before any allocation ([`Runtime::memory_need`]).
struct Layout {
    align: u64,
    /// Per tensor: bytes padded to the copy alignment.
    sizes: Vec<u64>,
    /// Per tensor: held in segments.
    segmented: Vec<bool>,
    roles: Vec<TensorRole>,
    /// Per tensor: its buffer in the plan.
    buffer_of: Vec<Option<usize>>,
    /// Per buffer: its offset in the arena.
    offsets: Vec<u64>,
    report: MemoryReport,
}

impl Layout {
    /// Counts the weights', inputs' and outputs' bytes (and their padding to the binding
    /// alignment) into the report, as compile places them.
    fn count_bytes(&mut self, graph: &Graph) {
        let r = &mut self.report;
        for (i, t) in graph.tensors().iter().enumerate() {
            let size = self.sizes[i];
            let padding = size.next_multiple_of(self.align) - size;
            match self.roles[i] {
                _ if t.alias_of.is_some() => {}
                TensorRole::Intermediate => {}
                TensorRole::Persistent => {
                    r.weight_bytes += size;
                    r.padding_bytes += padding;
                    match r
                        .weight_bytes_by_dtype
                        .iter_mut()
                        .find(|(d, _)| *d == t.dtype)
                    {
                        Some((_, b)) => *b += size,
                        None => r.weight_bytes_by_dtype.push((t.dtype, size)),
                    }
                }
                _ if self.segmented[i] => r.io_bytes += size,
                _ => {
                    r.io_bytes += size;
                    r.padding_bytes += padding;
                }
            }
        }
        r.weight_bytes_by_dtype.sort_by_key(|(d, _)| *d as u8);
    }
}
