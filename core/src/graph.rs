//! `Graph`: a model as an ordered list of standard ops over declared tensors.
//!
//! A graph is data: tensors (inputs, weights, intermediates, outputs) and nodes (an [`Op`], its
//! input tensors and its one output tensor). [`Runtime::compile`](crate::Runtime::compile) turns it
//! into a [`Model`](crate::Model): liveness, a static plan of the intermediates, allocations.
//!
//! Reshapes and views are free: [`Graph::reshape`] declares a new tensor that *aliases* the bytes
//! of another (its storage root), and [`Graph::view`] one that aliases a byte range of it, so the
//! planner sees one buffer, live from the first write to any of its views to the last read of any.
//! An op may write into a view ([`Graph::op_into`]): that is how a chain of ops tiled into parts
//! ([`Graph::tile`]) fills its output a part at a time.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::ops::{DType, Op, checked_product};
use crate::{Error, Result};
pub use tensormem_contract::TensorKind;

/// Names one tensor of a [`Graph`]. It carries its graph's identity, so an id used with another
/// graph (or a model compiled from one) is refused with [`Error::ForeignTensor`] instead of
/// naming whatever tensor has the same index there, and its slot's generation, so an id of a
/// tensor the graph removed ([`Graph::tile`]) is refused with [`Error::StaleHandle`] instead of
/// naming the tensor that took its slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId {
    /// The graph that declared it (clones of a graph share it).
    graph: u64,
    index: usize,
    /// The generation of slot `index` when the id was issued.
    generation: u32,
}

impl TensorId {
    /// Index of the tensor in its graph.
    pub fn index(self) -> usize {
        self.index
    }
}

/// Source of graph identities.
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

/// One declared tensor.
#[derive(Clone, Debug)]
pub struct TensorDecl {
    /// Name (inputs and weights) or node label.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost axis first.
    pub shape: Vec<usize>,
    /// Role.
    pub kind: TensorKind,
    /// The tensor whose bytes this one shares (reshape, view), if any. Always a root (never an
    /// alias).
    pub alias_of: Option<TensorId>,
    /// Where this tensor's bytes start in its root, in bytes (0 for a root and a reshape of one;
    /// a multiple of the element size; the range lies inside the root).
    pub offset: u64,
}

impl TensorDecl {
    /// Elements.
    ///
    /// # Errors
    /// [`Error::ArithmeticOverflow`] when the shape's product does not fit in `u64`.
    pub fn len(&self) -> Result<u64> {
        shape_len(&self.shape).ok_or_else(|| self.overflow("element count"))
    }

    /// Whether the shape has no elements.
    pub fn is_empty(&self) -> bool {
        self.shape.contains(&0)
    }

    /// Bytes.
    ///
    /// # Errors
    /// [`Error::ArithmeticOverflow`] when the byte count does not fit in `u64`.
    pub fn size(&self) -> Result<u64> {
        self.len()?
            .checked_mul(self.dtype.size())
            .ok_or_else(|| self.overflow("byte size"))
    }

    /// Checks that `len` bytes of data can be bound to this tensor as a `kind` (an input or a
    /// weight): its kind is `kind` and `len` its size, which it returns.
    ///
    /// # Errors
    /// [`crate::GraphError::WrongKind`], [`Error::SizeMismatch`], or [`Error::ArithmeticOverflow`]
    /// from [`TensorDecl::size`].
    pub(crate) fn check_data(&self, kind: TensorKind, len: u64) -> Result<u64> {
        if self.kind != kind {
            return Err(crate::GraphError::WrongKind {
                tensor: self.name.clone(),
                kind: self.kind,
                expected: kind,
            }
            .into());
        }
        let size = self.size()?;
        if len != size {
            return Err(Error::SizeMismatch {
                what: format!("data for '{}' {:?}", self.name, self.shape),
                expected: size,
                actual: len,
            });
        }
        Ok(size)
    }

    fn overflow(&self, quantity: &str) -> Error {
        Error::ArithmeticOverflow {
            what: format!("{quantity} of '{}' {:?}", self.name, self.shape),
            limit_name: "u64",
        }
    }
}

/// Elements of `shape`, or `None` on overflow.
fn shape_len(shape: &[usize]) -> Option<u64> {
    let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    checked_product(&dims)
}

/// One op application.
#[derive(Clone, Debug)]
pub struct Node {
    /// The op.
    pub op: Op,
    /// Input tensors, in the op's binding order.
    pub inputs: Vec<TensorId>,
    /// The output tensor.
    pub output: TensorId,
    /// A label for reports and traces.
    pub label: String,
}

/// A model: tensors and the ops that connect them, in execution order.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Identity stamped on every [`TensorId`] this graph issues.
    id: u64,
    tensors: Vec<TensorDecl>,
    /// Per slot of `tensors`: how many tensors have held it before the current one (a slot is
    /// reused when the graph removes a tensor).
    generations: Vec<u32>,
    nodes: Vec<Node>,
    outputs: Vec<TensorId>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Graph {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            tensors: Vec::new(),
            generations: Vec::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn id_at(&self, index: usize) -> TensorId {
        TensorId {
            graph: self.id,
            index,
            generation: self.generations.get(index).copied().unwrap_or(0),
        }
    }

    /// Appends `decl` in a new slot.
    fn push(&mut self, decl: TensorDecl) -> TensorId {
        self.tensors.push(decl);
        self.generations.push(0);
        self.id_at(self.tensors.len() - 1)
    }

    /// Drops the slots from `len` on (tensors declared by a pass that failed).
    fn truncate(&mut self, len: usize) {
        self.tensors.truncate(len);
        self.generations.truncate(len);
    }

    fn declare(&mut self, name: &str, dtype: DType, shape: &[usize], kind: TensorKind) -> TensorId {
        self.push(TensorDecl {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            kind,
            alias_of: None,
            offset: 0,
        })
    }

    /// Declares an input, set before each run.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> TensorId {
        self.declare(name, dtype, shape, TensorKind::Input)
    }

    /// Declares a weight, set once and kept across runs.
    pub fn weight(&mut self, name: &str, dtype: DType, shape: &[usize]) -> TensorId {
        self.declare(name, dtype, shape, TensorKind::Weight)
    }

    /// Appends `op` applied to `inputs`, producing a new tensor of `out_shape`. The op's
    /// signature is checked against the inputs' types and sizes and the output shape.
    ///
    /// # Errors
    /// [`Error::ForeignTensor`] for a tensor of another graph, [`Error::SizeMismatch`] for operands
    /// that do not match the op, [`Error::ArithmeticOverflow`] for a shape whose size overflows.
    pub fn op(
        &mut self,
        op: Op,
        inputs: &[TensorId],
        out_shape: &[usize],
        label: &str,
    ) -> Result<TensorId> {
        let out = self.check_op(&op, inputs, out_shape, label)?;
        let output = self.declare(label, out.dtype, out_shape, TensorKind::Intermediate);
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            output,
            label: label.to_string(),
        });
        Ok(output)
    }

    /// Appends `op` applied to `inputs`, writing into `output`: a view (or reshape) of an
    /// intermediate, which ops may fill a part at a time (the root is live from the first write to
    /// any of its views). The op's output must match `output`'s element type and count.
    ///
    /// # Errors
    /// As [`Graph::op`]; [`GraphError::NotAnIntermediateView`](crate::GraphError) when `output` is
    /// not an alias of an
    /// intermediate (inputs and weights are set by the host, and an op's own output tensor is
    /// written by that op).
    pub fn op_into(
        &mut self,
        op: Op,
        inputs: &[TensorId],
        output: TensorId,
        label: &str,
    ) -> Result<()> {
        let decl = self.decl(output)?.clone();
        if decl.alias_of.is_none() || decl.kind != TensorKind::Intermediate {
            return Err(crate::GraphError::NotAnIntermediateView {
                label: label.to_string(),
                tensor: decl.name.clone(),
                kind: decl.kind,
                root: decl.alias_of.is_none(),
            }
            .into());
        }
        let out = self.check_op(&op, inputs, &decl.shape, label)?;
        if out.dtype != decl.dtype {
            return Err(Error::DTypeMismatch {
                what: format!("{label}: {} output into '{}'", op.name(), decl.name),
                expected: decl.dtype,
                actual: out.dtype,
            });
        }
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            output,
            label: label.to_string(),
        });
        Ok(())
    }

    /// Checks `op` over `inputs` and an output of `out_shape`; returns the op's output operand.
    fn check_op(
        &self,
        op: &Op,
        inputs: &[TensorId],
        out_shape: &[usize],
        label: &str,
    ) -> Result<crate::ops::Operand> {
        let sig = op.signature()?;
        if inputs.len() != sig.inputs.len() {
            return Err(Error::SizeMismatch {
                what: format!("{label}: {} inputs", op.name()),
                expected: sig.inputs.len() as u64,
                actual: inputs.len() as u64,
            });
        }
        for (i, (id, want)) in inputs.iter().zip(&sig.inputs).enumerate() {
            let t = self.decl(*id)?;
            let len = t.len()?;
            if t.dtype != want.dtype || len != want.len {
                return Err(Error::SizeMismatch {
                    what: format!(
                        "{label}: {} input {i} ('{}', {} {:?}) against the op's {}",
                        op.name(),
                        t.name,
                        t.dtype.name(),
                        t.shape,
                        want.dtype.name()
                    ),
                    expected: want.len,
                    actual: len,
                });
            }
        }
        let out = sig.outputs[0];
        let out_len = shape_len(out_shape).ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("{label}: {} output shape {out_shape:?}", op.name()),
            limit_name: "u64",
        })?;
        if out_len != out.len {
            return Err(Error::SizeMismatch {
                what: format!("{label}: {} output shape {out_shape:?}", op.name()),
                expected: out.len,
                actual: out_len,
            });
        }
        Ok(out)
    }

    /// A new tensor of `shape` sharing the bytes of `t` (same element count).
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] when the element counts differ, [`Error::ForeignTensor`],
    /// [`Error::ArithmeticOverflow`].
    pub fn reshape(&mut self, t: TensorId, shape: &[usize]) -> Result<TensorId> {
        let src = self.decl(t)?.clone();
        let src_len = src.len()?;
        let len = shape_len(shape).ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("reshape of '{}' to {shape:?}", src.name),
            limit_name: "u64",
        })?;
        if len != src_len {
            return Err(Error::SizeMismatch {
                what: format!("reshape of '{}' {:?} to {shape:?}", src.name, src.shape),
                expected: src_len,
                actual: len,
            });
        }
        let root = src.alias_of.unwrap_or(t);
        Ok(self.push(TensorDecl {
            name: format!("{}.reshape", src.name),
            dtype: src.dtype,
            shape: shape.to_vec(),
            kind: src.kind,
            alias_of: Some(root),
            offset: src.offset,
        }))
    }

    /// A new tensor of `shape` over the bytes of `t` from `offset` (in bytes, relative to `t`):
    /// a byte range of `t`'s root, usable as an op input and, for an intermediate, as an op
    /// output ([`Graph::op_into`]). The binding offset a device needs (`binding_align`) is checked
    /// when the graph is compiled, where the device is known.
    ///
    /// # Errors
    /// [`Error::Misaligned`] for an offset that is not a multiple of the element size,
    /// [`Error::OutOfBounds`] for a range past the end of `t`, [`Error::ForeignTensor`],
    /// [`Error::ArithmeticOverflow`].
    pub fn view(&mut self, t: TensorId, offset: u64, shape: &[usize]) -> Result<TensorId> {
        let src = self.decl(t)?.clone();
        let src_size = src.size()?;
        let len = shape_len(shape).ok_or_else(|| Error::ArithmeticOverflow {
            what: format!("view of '{}' as {shape:?}", src.name),
            limit_name: "u64",
        })?;
        let overflow = || Error::ArithmeticOverflow {
            what: format!("byte range of a view of '{}'", src.name),
            limit_name: "u64",
        };
        let size = len.checked_mul(src.dtype.size()).ok_or_else(overflow)?;
        if !offset.is_multiple_of(src.dtype.size()) {
            return Err(Error::Misaligned {
                what: "view offset",
                value: offset,
                align: src.dtype.size(),
                align_name: "element size",
            });
        }
        if offset.checked_add(size).ok_or_else(overflow)? > src_size {
            return Err(Error::OutOfBounds {
                what: "view of a graph tensor",
                offset,
                size,
                limit: src_size,
            });
        }
        let root = src.alias_of.unwrap_or(t);
        Ok(self.push(TensorDecl {
            name: format!("{}[{offset}..{}]", src.name, offset + size),
            dtype: src.dtype,
            shape: shape.to_vec(),
            kind: src.kind,
            alias_of: Some(root),
            offset: src.offset + offset,
        }))
    }

    /// Marks `t` as a graph output (kept after the run, readable). A foreign id is refused by
    /// [`Runtime::compile`](crate::Runtime::compile).
    pub fn output(&mut self, t: TensorId) {
        if !self.outputs.contains(&t) {
            self.outputs.push(t);
        }
    }

    /// The declaration of `t`.
    ///
    /// # Errors
    /// [`Error::ForeignTensor`] for an id from another graph, [`Error::StaleHandle`] for an id of
    /// a tensor this graph removed ([`Graph::tile`]).
    pub fn decl(&self, t: TensorId) -> Result<&TensorDecl> {
        let foreign = || Error::ForeignTensor {
            tensor: t.index,
            tensors: self.tensors.len(),
        };
        let decl = self
            .tensors
            .get(t.index)
            .filter(|_| t.graph == self.id)
            .ok_or_else(foreign)?;
        let current = self.generations.get(t.index).copied().unwrap_or(0);
        if t.generation != current {
            return Err(Error::StaleHandle {
                what: "graph tensor removed by Graph::tile",
                slot: u32::try_from(t.index).unwrap_or(u32::MAX),
                generation: t.generation,
                current,
            });
        }
        Ok(decl)
    }

    /// Whether `t` names a tensor of this graph (or a clone of it) that it has not removed.
    pub fn contains(&self, t: TensorId) -> bool {
        self.decl(t).is_ok()
    }

    /// The tensor owning the bytes of `t` (itself unless it is a reshape).
    pub fn root(&self, t: TensorId) -> TensorId {
        self.decl(t).ok().and_then(|d| d.alias_of).unwrap_or(t)
    }

    /// All declared tensors.
    pub fn tensors(&self) -> &[TensorDecl] {
        &self.tensors
    }

    /// Nodes in execution order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Graph outputs.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }
}

#[cfg(any(test, feature = "test-support"))]
pub mod samples;
mod tile;

#[cfg(test)]
mod tests;
