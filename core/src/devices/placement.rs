//! A graph split across the devices of a [`DeviceSet`]: placement, per-device plans, transfers at
//! the cut edges.
//!
//! A [`Placement`] names the device of every node. The graph is cut into *stages*, maximal runs of
//! consecutive nodes on one device; each stage becomes a graph of its own, compiled on its
//! device's runtime with [`Runtime::compile`](crate::Runtime::compile), so each device's arena is
//! planned separately against its own budget, and weights live in that device's store (a weight
//! two devices read is held on both). A tensor produced in one stage and read in a later one is an
//! output of the first and an input of the second; [`PlacedModel::run`] copies it across
//! ([`transfer`]) before the second stage runs. Inputs are uploaded to every
//! stage that reads them.
//!
//! The stages run the same kernels on the same bytes in the same order as one device would, so a
//! split model's outputs equal the single-device outputs bit for bit on devices of one backend.

use std::collections::HashMap;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Ticket, Waiting};
use crate::devices::transfer::{self, End};
use crate::devices::{DeviceId, DeviceSet};
use crate::graph::{Graph, Node, TensorId, TensorKind};
use crate::runtime::tensor::Element;
use crate::runtime::{MemoryReport, Model};
use crate::{Error, Result};

/// Which device runs each node of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The device of every node, in graph order (manual placement; see
    /// [`Placement::from_fn`] to place by layer label).
    PerNode(Vec<DeviceId>),
    /// One contiguous stage per device, in device order, cut so that the weight bytes each
    /// device reads are as even as the node boundaries allow (by node count when the graph has no
    /// weights).
    BalancedByWeights,
}

impl Placement {
    /// A manual placement computed per node (e.g. from the layer number in its label).
    pub fn from_fn(graph: &Graph, mut device_of: impl FnMut(usize, &Node) -> DeviceId) -> Self {
        Placement::PerNode(
            graph
                .nodes()
                .iter()
                .enumerate()
                .map(|(i, n)| device_of(i, n))
                .collect(),
        )
    }

    /// The device of every node of `graph` on a set of `devices`.
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] when a per-node list does not cover the graph,
    /// [`Error::UnknownDevice`] for a device beyond the set.
    pub fn resolve(&self, graph: &Graph, devices: usize) -> Result<Vec<DeviceId>> {
        let nodes = graph.nodes().len();
        let out = match self {
            Placement::PerNode(v) => {
                if v.len() != nodes {
                    return Err(Error::SizeMismatch {
                        what: "per-node placement (one device per node)".into(),
                        expected: nodes as u64,
                        actual: v.len() as u64,
                    });
                }
                v.clone()
            }
            Placement::BalancedByWeights => balanced(graph, devices)?,
        };
        if let Some(&d) = out.iter().find(|d| d.index() >= devices) {
            return Err(Error::UnknownDevice { device: d, devices });
        }
        Ok(out)
    }
}

/// Contiguous stages of about equal weight bytes: each node that reads weights first goes to the
/// device whose share of the total contains the midpoint of those weight bytes; the others follow
/// the node before them.
fn balanced(graph: &Graph, devices: usize) -> Result<Vec<DeviceId>> {
    let nodes = graph.nodes();
    let mut seen = vec![false; graph.tensors().len()];
    let mut own = Vec::with_capacity(nodes.len());
    for n in nodes {
        let mut bytes = 0u64;
        for &i in &n.inputs {
            let root = graph.root(i);
            let decl = graph.decl(root)?;
            if decl.kind == TensorKind::Weight && !std::mem::replace(&mut seen[root.index()], true)
            {
                bytes += decl.size()?;
            }
        }
        own.push(bytes);
    }
    let total: u64 = own.iter().sum();
    let n = devices.max(1) as u128;
    let mut before = 0u64;
    let mut previous = 0u128;
    Ok(own
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let d = if total == 0 {
                i as u128 * n / nodes.len().max(1) as u128
            } else if w == 0 {
                // A node without weights of its own stays with the node before it (its producer,
                // in a chain), so a cut never separates an op from the weightless ops after it.
                previous
            } else {
                (u128::from(before) * 2 + u128::from(w)) * n / (u128::from(total) * 2)
            };
            before += w;
            previous = d.min(n - 1);
            DeviceId(previous as u32)
        })
        .collect())
}

/// A tensor copied into a stage before it runs.
#[derive(Clone, Debug)]
struct Import {
    /// The producing stage and the tensor's id there.
    from: (usize, TensorId),
    /// The input it fills in this stage.
    to: TensorId,
    /// Bytes.
    size: u64,
}

/// One run of consecutive nodes on one device, compiled there.
struct Stage {
    device: DeviceId,
    model: Model,
    /// The graph's tensor ids (by index) to this stage's ids.
    map: HashMap<usize, TensorId>,
    imports: Vec<Import>,
    first_node: usize,
    nodes: usize,
}

/// One device's share of a placed model. Sizes in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMemory {
    /// The device.
    pub device: DeviceId,
    /// Stages placed on it.
    pub stages: usize,
    /// Nodes placed on it.
    pub nodes: usize,
    /// Weight bytes its stages read (held in its store).
    pub weight_bytes: u64,
    /// Inputs, outputs and tensors arriving from other devices.
    pub io_bytes: u64,
    /// Its planned activation arenas, summed over its stages.
    pub activation_planned_bytes: u64,
    /// The device's budget limit, if any.
    pub budget: Option<u64>,
    /// Highest bytes the device's pools and staging belt reserved at once (its peak; never above
    /// `budget`).
    pub peak_reserved: u64,
}

/// What a placed model costs on each device, and what crosses between them.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedReport {
    /// Per device of the set, in order.
    pub devices: Vec<DeviceMemory>,
    /// `(device, first node, nodes)` of every stage, in run order.
    pub stages: Vec<(DeviceId, usize, usize)>,
    /// Bytes copied between stages per run.
    pub transfer_bytes_per_run: u64,
    /// Completed runs.
    pub runs: u64,
}

/// A graph compiled across a [`DeviceSet`]. See the module doc.
pub struct PlacedModel {
    set: DeviceSet,
    graph: Graph,
    stages: Vec<Stage>,
    runs: u64,
}

impl DeviceSet {
    /// Compiles `graph` split across the set by `placement` (module doc).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a graph without nodes; [`Placement::resolve`]'s errors; as
    /// [`Runtime::compile`](crate::Runtime::compile) on each device (an arena beyond a device's
    /// budget is [`Error::OutOfMemory`] there).
    pub fn compile(&self, graph: &Graph, placement: &Placement) -> Result<PlacedModel> {
        if graph.nodes().is_empty() {
            return Err(Error::invalid("a placed model needs at least one node"));
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
                let p = producer[t.index()].ok_or_else(|| {
                    Error::invalid(format!("'{}' is read before any node writes it", decl.name))
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

impl PlacedModel {
    /// Checks that `t` is a tensor of kind `kind` of the graph and `data` its size.
    fn check_set(&self, t: TensorId, kind: TensorKind, data: &[u8]) -> Result<()> {
        let decl = self.graph.decl(t)?;
        if decl.kind != kind {
            return Err(Error::invalid(format!(
                "'{}' is a {:?}, not a {kind:?}",
                decl.name, decl.kind
            )));
        }
        if data.len() as u64 != decl.size()? {
            return Err(Error::SizeMismatch {
                what: format!("data for '{}' {:?}", decl.name, decl.shape),
                expected: decl.size()?,
                actual: data.len() as u64,
            });
        }
        Ok(())
    }

    /// Binds weight `t` on every device whose stages read it ([`Model::set_weight`]). Native
    /// only; see [`PlacedModel::set_weight_async`].
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        complete_now(self.set_with(Waiting::Blocking, t, TensorKind::Weight, data))
    }

    /// [`PlacedModel::set_weight`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    pub async fn set_weight_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        self.set_with(Waiting::Async, t, TensorKind::Weight, data)
            .await
    }

    /// Uploads input `t` to every stage that reads it. Native only; see
    /// [`PlacedModel::set_input_async`].
    ///
    /// # Errors
    /// As [`Model::set_input`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_input(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        complete_now(self.set_with(Waiting::Blocking, t, TensorKind::Input, data))
    }

    /// [`PlacedModel::set_input`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_input`].
    pub async fn set_input_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        self.set_with(Waiting::Async, t, TensorKind::Input, data)
            .await
    }

    async fn set_with(
        &mut self,
        waiting: Waiting,
        t: TensorId,
        kind: TensorKind,
        data: &[u8],
    ) -> Result<Ticket> {
        self.check_set(t, kind, data)?;
        let root = self.graph.root(t).index();
        let mut last = Ticket::DONE;
        for s in &mut self.stages {
            let Some(&id) = s.map.get(&root) else {
                continue;
            };
            let m = &mut s.model;
            let ticket = match (waiting, kind) {
                #[cfg(not(target_arch = "wasm32"))]
                (Waiting::Blocking, TensorKind::Weight) => m.set_weight(id, data)?,
                #[cfg(not(target_arch = "wasm32"))]
                (Waiting::Blocking, _) => m.set_input(id, data)?,
                (Waiting::Async, TensorKind::Weight) => m.set_weight_async(id, data).await?,
                (Waiting::Async, _) => m.set_input_async(id, data).await?,
            };
            last = last.max(ticket);
        }
        Ok(last)
    }

    /// Runs every stage in order, copying the tensors that cross devices before the stage that
    /// reads them, and waits for the last stage of every device. Native only; see
    /// [`PlacedModel::run_async`].
    ///
    /// # Errors
    /// As [`Model::run`] and [`DeviceSet::copy`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(&mut self) -> Result<()> {
        complete_now(self.run_with(Waiting::Blocking))
    }

    /// [`PlacedModel::run`] without blocking.
    ///
    /// # Errors
    /// As [`PlacedModel::run`].
    pub async fn run_async(&mut self) -> Result<()> {
        self.run_with(Waiting::Async).await
    }

    async fn run_with(&mut self, waiting: Waiting) -> Result<()> {
        let mut last = vec![Ticket::DONE; self.set.len()];
        for s in 0..self.stages.len() {
            let stage = &self.stages[s];
            let rt = self.set.device(stage.device)?;
            for imp in &stage.imports {
                let from = &self.stages[imp.from.0];
                let (src, src_offset) = from.model.location(imp.from.1)?;
                let (dst, dst_offset) = stage.model.location(imp.to)?;
                let src_rt = self.set.device(from.device)?;
                let (_, path) = transfer::copy_range(
                    waiting,
                    End::new(src_rt, src, src_offset),
                    End::new(rt, dst, dst_offset),
                    imp.size,
                )
                .await?;
                self.set.stats.add(path, imp.size);
            }
            let t = self.stages[s].model.enqueue()?;
            let d = self.stages[s].device.index();
            last[d] = last[d].max(t);
        }
        for (rt, t) in self.set.runtimes().iter().zip(last) {
            waiting.ticket(rt.backend().as_ref(), t).await?;
        }
        self.runs += 1;
        Ok(())
    }

    /// Downloads output `t` (or a tensor that crosses devices) from the device that produced it
    /// ([`Model::read_output`]). Native only; see [`PlacedModel::read_output_async`].
    ///
    /// # Errors
    /// As [`Model::read_output`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_output<T: Element>(&self, t: TensorId) -> Result<Vec<T>> {
        let (stage, id) = self.home(t)?;
        stage.model.read_output(id)
    }

    /// [`PlacedModel::read_output`] without blocking.
    ///
    /// # Errors
    /// As [`Model::read_output`].
    pub async fn read_output_async<T: Element>(&self, t: TensorId) -> Result<Vec<T>> {
        let (stage, id) = self.home(t)?;
        stage.model.read_output_async(id).await
    }

    /// The first stage that holds `t` (its producer, for an intermediate) and its id there.
    fn home(&self, t: TensorId) -> Result<(&Stage, TensorId)> {
        let decl = self.graph.decl(t)?;
        self.stages
            .iter()
            .find_map(|s| s.map.get(&t.index()).map(|&id| (s, id)))
            .ok_or_else(|| Error::NotAnOutput {
                tensor: t.index(),
                name: decl.name.clone(),
            })
    }

    /// The stages' own memory reports, in run order, with their devices.
    pub fn stage_reports(&self) -> Vec<(DeviceId, MemoryReport)> {
        self.stages
            .iter()
            .map(|s| (s.device, s.model.memory_report()))
            .collect()
    }

    /// Per-device memory and the traffic between devices.
    pub fn report(&self) -> PlacedReport {
        let mut devices: Vec<DeviceMemory> = self
            .set
            .runtimes()
            .iter()
            .map(|rt| DeviceMemory {
                device: rt.device_id(),
                stages: 0,
                nodes: 0,
                weight_bytes: 0,
                io_bytes: 0,
                activation_planned_bytes: 0,
                budget: rt.budget().limit(),
                peak_reserved: rt.budget().peak_reserved(),
            })
            .collect();
        for s in &self.stages {
            let m = s.model.memory_report();
            let d = &mut devices[s.device.index()];
            d.stages += 1;
            d.nodes += s.nodes;
            d.weight_bytes += m.weight_bytes;
            d.io_bytes += m.io_bytes;
            d.activation_planned_bytes += m.activation_planned_bytes;
        }
        PlacedReport {
            devices,
            stages: self
                .stages
                .iter()
                .map(|s| (s.device, s.first_node, s.nodes))
                .collect(),
            transfer_bytes_per_run: self
                .stages
                .iter()
                .flat_map(|s| &s.imports)
                .map(|i| i.size)
                .sum(),
            runs: self.runs,
        }
    }

    /// The device set.
    pub fn devices(&self) -> &DeviceSet {
        &self.set
    }

    /// The graph this model was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
