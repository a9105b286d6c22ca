//! A graph split across the devices of a [`DeviceSet`]: placement, per-device plans, transfers at
//! the cut edges.
//!
//! A [`Placement`] names the device of every node. The graph is cut into *stages*, maximal runs of
//! consecutive nodes on one device; each stage becomes a graph of its own, compiled on its
//! device's runtime with [`Runtime::compile`](crate::Runtime::compile), so each device's arena is
//! planned separately against its own budget, and weights live in that device's store (a weight
//! two devices read is held on both). A tensor produced in one stage and read in a later one is an
//! output of the first and an input of the second; [`PlacedModel::run`] copies it across
//! ([`transfer`](super::transfer)) before the second stage runs. Inputs are uploaded to every
//! stage that reads them.
//!
//! The stages run the same kernels on the same bytes in the same order as one device would, so a
//! split model's outputs equal the single-device outputs bit for bit on devices of one backend.
//!
//! [`DeviceSet`]: crate::devices::DeviceSet

mod compile;
mod model;
mod report;

use crate::devices::DeviceId;
use crate::graph::{Graph, Node, TensorKind};
use crate::{Error, Result};

pub use model::PlacedModel;
pub use report::{DeviceMemory, PlacedReport};

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
