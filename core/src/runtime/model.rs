//! `Model`: a graph compiled against a runtime — liveness, a static plan of its intermediates in one
//! arena, weights bound in the runtime's store (shared with every other model), and execution.
//!
//! This file holds the model's state and where its tensors are; compilation ([`compile`]),
//! host writes of weights and inputs ([`upload`]), execution ([`execute`]), the run's trace
//! ([`node_trace`]), the memory report ([`report`]) and the offload program of a budgeted model
//! ([`offloaded`]) are its submodules.

use crate::graph::{Graph, TensorId, TensorKind};
use crate::pool::Allocation;
use crate::runtime::Runtime;
use crate::runtime::segments::Segments;
use crate::runtime::weights::WeightKey;
use crate::{Error, Result};

mod compile;
mod execute;
mod finite;
mod node_trace;
pub(crate) mod offloaded;
mod report;
mod upload;

pub use offloaded::{CompileDesc, OffloadReport, Rates};
pub use report::MemoryReport;
pub use upload::WEIGHT_CHUNK_BYTES;

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
                Ok(d) if d.kind == TensorKind::Weight => crate::GraphError::WeightNotSet {
                    tensor: d.name.clone(),
                }
                .into(),
                _ => crate::GraphError::NoStorage {
                    tensor: root.index(),
                    scope: "in this model",
                    why: "never written nor read",
                }
                .into(),
            })
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
