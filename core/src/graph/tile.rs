//! Tiling: a chain of ops rewritten as `parts` copies of itself, each over one slice of the ops'
//! independent axis, so that the chain's largest working set shrinks by the part count.
//!
//! The cases that need it are attention (scores → softmax → context over `batch·heads` binds
//! `2 · batch · heads · seq²` floats in the softmax) and a feed-forward block (up-projection →
//! activation → down-projection → residual → norm, by rows of tokens: the activation binds twice
//! `rows · intermediate` floats). Tiled, each part binds a part's share, and the planner reuses
//! one part's slots for the next.
//!
//! Core owns the pass because it knows, per op, the axis along which outputs are independent and
//! which operands grow along it (`ops::split`), so any model's chain tiles the same way and
//! every element is computed by the same op over the same bytes: a tiled graph's outputs equal the
//! untiled graph's bit for bit (the conformance suite checks it on every target).
//!
//! Part `i` of the chain binds, per operand of each op:
//! * an operand of a shared shape (a weight, a bias) whole;
//! * an operand that grows with the units: a [view](Graph::view) of its `i`-th slice when the
//!   tensor comes from outside the chain or is *exported* (no op of the chain reads it, or a node
//!   outside the chain binds it, or it is a graph output or already a view, or it has a reshape or
//!   view no op of the chain binds: each part writes its slice of it, through
//!   [`Graph::op_into`]); a fresh tensor of one part's size when only the chain reads it (the bytes
//!   the tiling saves), bound through a reshape of it where the untiled op bound a reshape. So a
//!   builder may tile a chain as soon as it has appended it, before the ops that read its result.
//!
//! **Staged** ([`Graph::tile_staged`]): each slice from outside is copied ([`Op::Copy`]) into a
//! tensor of its own before part 0, and each exported slice written into a part tensor copied into
//! place after the last part. Each slice is then a root an offload schedule moves alone, where a
//! view needs its whole root resident; the cost is one device copy of the edge tensors.
//!
//! Parts run in order, so a part reads only slices its own earlier ops wrote. The untiled chain's
//! internal tensors are removed and the pass's last tensors take their slots, so every other id
//! stays valid and a removed one is refused ([`Error::StaleHandle`]).
//!
//! # Limits
//! * `parts` must divide every op's unit count (a masked softmax's unit is one mask row: at
//!   batch 8, MiniLM's attention tiles into 1, 2, 4 or 8 parts).
//! * A product cut by rows must keep the host's arithmetic per row ([`Op::rows_split_exact`]: the
//!   host picks its kernel by row count), else the parts would not be bit-identical.
//! * An op that reads a whole tensor the chain produces a part at a time, or whose output does not
//!   grow with its units, ends the chain: the pass refuses it.
//! * Views must sit on the device's `binding_align`; the compiler refuses one that does not.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::graph::{Graph, Node, TensorId, TensorKind};
use crate::ops::Op;
use crate::ops::split::Share;
use crate::{Error, Result};

/// One op of the chain as the pass sees it.
struct Step {
    /// Units of the op per part.
    per_part: u32,
    /// How each operand (inputs, then the output) follows the units.
    shares: Vec<Share>,
}

impl Graph {
    /// Tiles nodes `nodes` (a chain, in execution order) into `parts` parts along their
    /// independent axis (module doc). One part leaves the graph as it is.
    ///
    /// # Errors
    /// [`ArgumentError`](crate::ArgumentError) for zero parts or a range outside the node list;
    /// [`GraphError::Untileable`](crate::GraphError::Untileable) for a chain the pass cannot tile
    /// (an op without an independent axis, a unit count `parts` does not divide, a whole read of a
    /// tensor the chain produces, an output shared by the parts); the graph is left as it was.
    pub fn tile(&mut self, nodes: Range<usize>, parts: u32) -> Result<()> {
        self.tile_as(nodes, parts, false)
    }

    /// [`Graph::tile`] with every slice that crosses the chain's edge staged through a tensor of
    /// its own (module doc, "Staged"): the parts read copies of their input slices made before
    /// the first part and write their output slices into part tensors copied into place after
    /// the last, so each slice is a root an offload schedule can move on its own.
    ///
    /// # Errors
    /// As [`Graph::tile`].
    pub fn tile_staged(&mut self, nodes: Range<usize>, parts: u32) -> Result<()> {
        self.tile_as(nodes, parts, true)
    }

    fn tile_as(&mut self, nodes: Range<usize>, parts: u32, staged: bool) -> Result<()> {
        if parts == 0 {
            return Err(crate::ArgumentError::zero("tile parts").into());
        }
        if nodes.start >= nodes.end || nodes.end > self.nodes.len() {
            return Err(crate::ArgumentError::invalid_value(
                "tile node range",
                format!("{nodes:?}"),
                format!(
                    "a non-empty range of the graph's {} nodes",
                    self.nodes.len()
                ),
            )
            .into());
        }
        if parts == 1 {
            return Ok(());
        }
        let declared = self.tensors.len();
        let written: Vec<usize> = self.nodes[nodes.clone()]
            .iter()
            .map(|n| self.root(n.output).index())
            .collect();
        match self.tiled(nodes.clone(), parts, staged) {
            Ok(tiled) => {
                self.nodes.splice(nodes, tiled);
                self.remove_untiled(&written, declared);
                Ok(())
            }
            Err(e) => {
                self.truncate(declared); // the views and parts declared so far
                Err(e)
            }
        }
    }

    /// The nodes replacing `range`, declaring the views and part tensors they bind; `staged`:
    /// slices crossing the chain's edge go through copies (module doc).
    fn tiled(&mut self, range: Range<usize>, parts: u32, staged: bool) -> Result<Vec<Node>> {
        let chain: Vec<Node> = self.nodes[range.clone()].to_vec();
        let exported = self.exported_roots(&range);
        let steps = self.steps(&chain, parts)?;
        let mut out = Vec::with_capacity(chain.len() * parts as usize);
        // Staged: the copies into the parts' inputs (before every part, one per slice read) and
        // out of their outputs (after every part).
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut staged_in: HashMap<(usize, u64, u64), TensorId> = HashMap::new();
        // Per part: the fresh tensor standing for each internal root, and the reshape of it standing
        // for each reshape of that root the chain binds.
        let mut part_of: HashMap<usize, TensorId> = HashMap::new();
        let mut alias_part: HashMap<usize, TensorId> = HashMap::new();
        for i in 0..parts {
            part_of.clear();
            alias_part.clear();
            for (node, step) in chain.iter().zip(&steps) {
                let op = node.op.restricted(step.per_part);
                let label = format!("{}.part{i}", node.label);
                let mut inputs = Vec::with_capacity(node.inputs.len());
                for (&t, share) in node.inputs.iter().zip(&step.shares) {
                    inputs.push(match *share {
                        Share::Whole => t,
                        Share::PerUnit(unit) => match part_of.get(&self.root(t).index()) {
                            Some(&p) if self.root(t) == t => p,
                            Some(&p) => match alias_part.get(&t.index()) {
                                Some(&a) => a,
                                None => {
                                    let len = self.decl(p)?.len()?;
                                    let shape = part_shape(&self.decl(t)?.shape, len);
                                    let a = self.reshape(p, &shape)?;
                                    alias_part.insert(t.index(), a);
                                    a
                                }
                            },
                            None => {
                                let bytes = unit * u64::from(step.per_part);
                                let key = (t.index(), u64::from(i), bytes);
                                match staged_in.get(&key) {
                                    Some(&copy) => copy,
                                    None => {
                                        let view = self.part_view(t, i, bytes)?;
                                        match copy_len(self, view, staged)? {
                                            Some(len) => {
                                                let name = format!("{}.in{i}", self.decl(t)?.name);
                                                let (copy, node) =
                                                    self.staged_copy(view, len, &name, true)?;
                                                before.push(node);
                                                staged_in.insert(key, copy);
                                                copy
                                            }
                                            None => view,
                                        }
                                    }
                                }
                            }
                        },
                    });
                }
                let Some(&Share::PerUnit(unit)) = step.shares.last() else {
                    return Err(Error::invariant("a tiled op's output grows", &label));
                };
                let bytes = unit * u64::from(step.per_part);
                let root = self.root(node.output).index();
                let output =
                    if exported.contains(&root) || self.decl(node.output)?.alias_of.is_some() {
                        let view = self.part_view(node.output, i, bytes)?;
                        match copy_len(self, view, staged)? {
                            Some(len) => {
                                let (part, node) = self.staged_copy(view, len, &label, false)?;
                                after.push(node);
                                part_of.insert(root, part);
                                part
                            }
                            None => view,
                        }
                    } else {
                        let decl = self.decl(node.output)?.clone();
                        let shape = part_shape(&decl.shape, bytes / decl.dtype.size());
                        let p = self.declare(&label, decl.dtype, &shape, TensorKind::Intermediate);
                        part_of.insert(root, p);
                        p
                    };
                let shape = self.decl(output)?.shape.clone();
                self.check_op(&op, &inputs, &shape, &label)?;
                out.push(Node {
                    op,
                    inputs,
                    output,
                    label,
                });
            }
        }
        before.extend(out);
        before.extend(after);
        Ok(before)
    }

    /// A fresh tensor shaped as `view` (`len` elements) and the copy between them: from the view
    /// into the tensor when `into_part` (a staged input), else from the tensor into the view (a
    /// staged output).
    fn staged_copy(
        &mut self,
        view: TensorId,
        len: u32,
        name: &str,
        into_part: bool,
    ) -> Result<(TensorId, Node)> {
        let decl = self.decl(view)?.clone();
        let part = self.declare(name, decl.dtype, &decl.shape, TensorKind::Intermediate);
        let (input, output) = if into_part {
            (view, part)
        } else {
            (part, view)
        };
        let op = Op::Copy { len };
        let label = format!("{name}.copy");
        self.check_op(&op, &[input], &decl.shape, &label)?;
        Ok((
            part,
            Node {
                op,
                inputs: vec![input],
                output,
                label,
            },
        ))
    }

    /// Roots a tiled chain must still fill whole: graph outputs, every tensor a node outside
    /// `range` binds, every output of the chain no op of the chain reads (the chain's
    /// result, which later nodes, perhaps not added yet, read), and the root of every reshape or
    /// view no op of the chain binds (declared to be read later, as well).
    fn exported_roots(&self, range: &Range<usize>) -> HashSet<usize> {
        let mut out: HashSet<usize> = self.outputs.iter().map(|&o| self.root(o).index()).collect();
        let mut read_in_chain = HashSet::new();
        let mut bound_in_chain = HashSet::new();
        for (k, node) in self.nodes.iter().enumerate() {
            if range.contains(&k) {
                read_in_chain.extend(node.inputs.iter().map(|&t| self.root(t).index()));
                bound_in_chain.extend(node.inputs.iter().map(|t| t.index()));
                bound_in_chain.insert(node.output.index());
            } else {
                for &t in node.inputs.iter().chain(std::iter::once(&node.output)) {
                    out.insert(self.root(t).index());
                }
            }
        }
        for (k, decl) in self.tensors.iter().enumerate() {
            if let Some(root) = decl.alias_of.filter(|_| !bound_in_chain.contains(&k)) {
                out.insert(root.index());
            }
        }
        for node in &self.nodes[range.clone()] {
            let root = self.root(node.output).index();
            if !read_in_chain.contains(&root) {
                out.insert(root);
            }
        }
        out
    }

    /// Checks that `chain` tiles into `parts` (module doc) and returns each op's step.
    fn steps(&self, chain: &[Node], parts: u32) -> Result<Vec<Step>> {
        let refuse = |node: &Node, reason: String| {
            Error::from(crate::GraphError::Untileable {
                label: node.label.clone(),
                op: node.op.name(),
                reason,
            })
        };
        // Root produced in the chain -> (the tensor written, bytes per part).
        let mut produced: HashMap<usize, (TensorId, u64)> = HashMap::new();
        let mut steps = Vec::with_capacity(chain.len());
        for node in chain {
            let units = node
                .op
                .split_units()
                .ok_or_else(|| refuse(node, "has no independent axis to tile".into()))?;
            if !units.is_multiple_of(parts) {
                return Err(refuse(
                    node,
                    format!("has {units} independent units, not a multiple of {parts} parts"),
                ));
            }
            let per_part = units / parts;
            if !node.op.rows_split_exact(per_part) {
                return Err(refuse(
                    node,
                    format!(
                        "over {per_part} of its {units} rows a part would round differently on \
                         the host (not bit-identical)"
                    ),
                ));
            }
            let shares = node
                .op
                .split_shares()
                .ok_or_else(|| refuse(node, "has operands that do not follow its units".into()))?;
            for (&t, share) in node.inputs.iter().zip(&shares) {
                let Some(&(written, bytes)) = produced.get(&self.root(t).index()) else {
                    continue;
                };
                let (a, b) = (self.decl(t)?, self.decl(written)?);
                let same_bytes = a.offset == b.offset && a.size()? == b.size()?;
                match *share {
                    Share::PerUnit(unit) if same_bytes && unit * u64::from(per_part) == bytes => {}
                    _ => {
                        return Err(refuse(
                            node,
                            format!(
                                "reads '{}' other than a part at a time as the chain writes it",
                                a.name
                            ),
                        ));
                    }
                }
            }
            let Some(&Share::PerUnit(unit)) = shares.last() else {
                return Err(refuse(node, "has an output the parts would share".into()));
            };
            let root = self.root(node.output).index();
            if produced
                .insert(root, (node.output, unit * u64::from(per_part)))
                .is_some()
            {
                return Err(refuse(
                    node,
                    "writes a tensor the chain already wrote".into(),
                ));
            }
            steps.push(Step { per_part, shares });
        }
        Ok(steps)
    }

    /// Removes the tensors of the untiled chain no node binds any more (module doc): each root in
    /// `written` that is no graph output and that no node binds, itself or through a reshape or
    /// view, with its reshapes and views. The last tensors declared after the first `declared`
    /// (the pass's own) move into the freed slots, which get a new generation.
    ///
    /// The pass declares at least two tensors for every one it frees (per part, a part tensor for
    /// each internal root and a reshape of it for each reshape the chain bound), so every freed
    /// slot is filled and the ids of the tensors declared before the pass stay as they were.
    fn remove_untiled(&mut self, written: &[usize], declared: usize) {
        let mut bound = vec![false; self.tensors.len()];
        let nodes = self.nodes.iter();
        let ids = nodes.flat_map(|n| n.inputs.iter().chain(std::iter::once(&n.output)));
        for &t in ids.chain(&self.outputs) {
            if let Some(b) = bound.get_mut(self.root(t).index()) {
                *b = true;
            }
        }
        let gone: HashSet<usize> = written.iter().copied().filter(|&r| !bound[r]).collect();
        let holes = (0..declared).filter(|&k| {
            let root = self.tensors[k].alias_of.map_or(k, TensorId::index);
            gone.contains(&root)
        });
        let mut moved: HashMap<usize, TensorId> = HashMap::new();
        for hole in holes.collect::<Vec<_>>() {
            let last = self.tensors.len() - 1;
            if last < declared {
                break; // not reached: see the doc
            }
            self.tensors.swap_remove(hole);
            self.generations.pop();
            self.generations[hole] = self.generations[hole].wrapping_add(1);
            moved.insert(last, self.id_at(hole));
        }
        let remap = |t: &mut TensorId| {
            if let Some(&to) = moved.get(&t.index()) {
                *t = to;
            }
        };
        for node in &mut self.nodes {
            node.inputs.iter_mut().for_each(&remap);
            remap(&mut node.output);
        }
        for decl in &mut self.tensors {
            decl.alias_of.iter_mut().for_each(&remap);
        }
    }

    /// The `i`-th slice of `bytes` bytes of `t`, as a view.
    fn part_view(&mut self, t: TensorId, i: u32, bytes: u64) -> Result<TensorId> {
        let decl = self.decl(t)?;
        let shape = part_shape(&decl.shape, bytes / decl.dtype.size());
        self.view(t, u64::from(i) * bytes, &shape)
    }
}

/// The element count of `view` when it is to be staged (`staged`) and [`Op::Copy`] can copy it
/// (4-byte elements, a count that fits `u32`); `None`: it is bound as the view.
fn copy_len(g: &Graph, view: TensorId, staged: bool) -> Result<Option<u32>> {
    let decl = g.decl(view)?;
    if !staged || decl.dtype.size() != 4 {
        return Ok(None);
    }
    Ok(u32::try_from(decl.len()?).ok())
}

/// The shape of `len` elements cut from a tensor of `shape`: its outer axis shortened when the
/// inner axes divide `len`, else flat.
fn part_shape(shape: &[usize], len: u64) -> Vec<usize> {
    let inner: u64 = shape.iter().skip(1).map(|&d| d as u64).product();
    if shape.len() > 1 && inner > 0 && len.is_multiple_of(inner) {
        let mut s = shape.to_vec();
        s[0] = (len / inner) as usize;
        s
    } else {
        vec![len as usize]
    }
}

#[cfg(test)]
mod tests;
