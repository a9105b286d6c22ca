//! Compiling a graph split across a device set: the stages, cut where the device changes, and the
//! tensors that cross from one stage to a later one.

use std::collections::HashMap;

use crate::Result;
use crate::devices::{DeviceId, DeviceSet};
use crate::graph::{Graph, TensorId, TensorKind};

use super::Placement;
use super::model::{Import, PlacedModel, Stage};

impl DeviceSet {
    /// Compiles `graph` split across the set by `placement` (the [`placement`](super) module doc).
    ///
    /// # Errors
    /// [`ArgumentError::Zero`](crate::ArgumentError::Zero) for a graph without nodes;
    /// [`Placement::resolve`]'s errors; as [`Runtime::compile`](crate::Runtime::compile) on each
    /// device (an arena beyond a device's budget is
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) there).
    pub fn compile(&self, graph: &Graph, placement: &Placement) -> Result<PlacedModel> {
        if graph.nodes().is_empty() {
            return Err(crate::ArgumentError::zero("nodes of a placed model's graph").into());
        }
        let devices = placement.resolve(graph, self.len())?;
        let mut builders: Vec<Builder> = Vec::new();
        // Per graph tensor (root index): the stage that produces it.
        let mut producer: Vec<Option<usize>> = vec![None; graph.tensors().len()];
        for (i, node) in graph.nodes().iter().enumerate() {
            if builders.last().is_none_or(|b| b.device != devices[i]) {
                builders.push(Builder::new(devices[i], i));
            }
            let s = builders.len() - 1;
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &t in &node.inputs {
                inputs.push(import(graph, &mut builders, &producer, s, t)?);
            }
            let b = &mut builders[s];
            let out_shape = &graph.decl(node.output)?.shape;
            let out = b
                .graph
                .op(node.op.clone(), &inputs, out_shape, &node.label)?;
            b.map.insert(node.output.index(), out);
            b.nodes += 1;
            producer[graph.root(node.output).index()] = Some(s);
        }
        for &o in graph.outputs() {
            graph.decl(o)?;
            let home = producer[graph.root(o).index()].unwrap_or(0);
            let id = import(graph, &mut builders, &producer, home, o)?;
            builders[home].graph.output(id);
        }
        let stages = builders
            .into_iter()
            .map(|b| {
                let model = self.device(b.device)?.compile(&b.graph)?;
                Ok(Stage {
                    device: b.device,
                    model,
                    map: b.map,
                    imports: b.imports,
                    first_node: b.first_node,
                    nodes: b.nodes,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PlacedModel {
            set: self.clone(),
            graph: graph.clone(),
            stages,
            runs: 0,
        })
    }
}

/// A stage's graph while it is being built.
struct Builder {
    device: DeviceId,
    graph: Graph,
    map: HashMap<usize, TensorId>,
    imports: Vec<Import>,
    first_node: usize,
    nodes: usize,
}

impl Builder {
    fn new(device: DeviceId, first_node: usize) -> Self {
        Builder {
            device,
            graph: Graph::new(),
            map: HashMap::new(),
            imports: Vec::new(),
            first_node,
            nodes: 0,
        }
    }
}

/// The id of graph tensor `t` in stage `s`, declaring it there on first use: an input or weight
/// of the same name, a reshape of its root, or (produced by an earlier stage) an input filled by
/// a copy from that stage, where it becomes an output.
fn import(
    graph: &Graph,
    builders: &mut [Builder],
    producer: &[Option<usize>],
    s: usize,
    t: TensorId,
) -> Result<TensorId> {
    if let Some(&id) = builders[s].map.get(&t.index()) {
        return Ok(id);
    }
    let decl = graph.decl(t)?.clone();
    let root = graph.root(t);
    let id = if root != t {
        let r = import(graph, builders, producer, s, root)?;
        builders[s].graph.reshape(r, &decl.shape)?
    } else {
        match decl.kind {
            TensorKind::Input => builders[s].graph.input(&decl.name, decl.dtype, &decl.shape),
            TensorKind::Weight => builders[s]
                .graph
                .weight(&decl.name, decl.dtype, &decl.shape),
            TensorKind::Intermediate => {
                let p =
                    producer[t.index()].ok_or_else(|| crate::ArgumentError::ReadBeforeWrite {
                        tensor: format!("'{}'", decl.name),
                        reader: "a node of the placed graph".into(),
                    })?;
                let from = builders[p].map[&t.index()];
                builders[p].graph.output(from);
                let name = format!("{} (from {})", decl.name, builders[p].device);
                let to = builders[s].graph.input(&name, decl.dtype, &decl.shape);
                builders[s].imports.push(Import {
                    from: (p, from),
                    to,
                    size: decl.size()?,
                });
                to
            }
        }
    };
    builders[s].map.insert(t.index(), id);
    Ok(id)
}
