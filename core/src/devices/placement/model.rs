//! A graph compiled across a device set: its stages, and binding, running and reading them.

use std::collections::HashMap;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Ticket, Waiting};
use crate::devices::transfer::{self, End};
use crate::devices::{DeviceId, DeviceSet};
use crate::graph::{Graph, TensorId, TensorKind};
use crate::runtime::Model;
use crate::runtime::tensor::Element;
use crate::{Error, Result};

/// A tensor copied into a stage before it runs.
#[derive(Clone, Debug)]
pub(super) struct Import {
    /// The producing stage and the tensor's id there.
    pub(super) from: (usize, TensorId),
    /// The input it fills in this stage.
    pub(super) to: TensorId,
    /// Bytes.
    pub(super) size: u64,
}

/// One run of consecutive nodes on one device, compiled there.
pub(super) struct Stage {
    pub(super) device: DeviceId,
    pub(super) model: Model,
    /// The graph's tensor ids (by index) to this stage's ids.
    pub(super) map: HashMap<usize, TensorId>,
    pub(super) imports: Vec<Import>,
    pub(super) first_node: usize,
    pub(super) nodes: usize,
}

/// A graph compiled across a [`DeviceSet`]. See the [`placement`](super) module doc.
pub struct PlacedModel {
    pub(super) set: DeviceSet,
    pub(super) graph: Graph,
    pub(super) stages: Vec<Stage>,
    pub(super) runs: u64,
}

impl PlacedModel {
    /// Checks that `t` is a tensor of kind `kind` of the graph and `data` its size.
    fn check_set(&self, t: TensorId, kind: TensorKind, data: &[u8]) -> Result<()> {
        self.graph.decl(t)?.check_data(kind, data.len() as u64)?;
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

    /// The device set.
    pub fn devices(&self) -> &DeviceSet {
        &self.set
    }

    /// The graph this model was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
