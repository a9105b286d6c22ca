//! The trace of one model run: per-node tensor uses, and the planned tensors' lifetimes as
//! virtual allocations inside the arena. Only built while the runtime has a tracer, so it stays
//! out of the execution path's module.

use crate::Result;
use crate::graph::Node;
use crate::trace::{Access, EventKind, Tracer};

use super::Model;

/// Records one run's tensor uses, and the lifetimes of the tensors planned in the arena as virtual
/// allocations (pool `"<pool>/planned"`, child of the arena) from their first write to their last use.
pub(super) struct NodeTracer {
    tracer: Tracer,
    pool: String,
    /// Per root tensor: trace id (owned allocations: the pool's; planned ones: issued at first write).
    ids: Vec<u64>,
    /// Per root tensor: first and last node that binds it.
    span: Vec<Option<(usize, usize)>>,
}

impl NodeTracer {
    pub(super) fn new(model: &Model, tracer: Tracer) -> Result<Self> {
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

    pub(super) fn before(&mut self, model: &Model, step: usize, node: &Node) -> Result<()> {
        let out = model.graph.root(node.output).index();
        if let Some(p) = model.places[out].filter(|p| p.planned)
            && self.span[out].is_some_and(|s| s.0 == step)
        {
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

    pub(super) fn after(&mut self, model: &Model, step: usize, node: &Node) {
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
