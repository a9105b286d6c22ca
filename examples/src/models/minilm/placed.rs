//! MiniLM split across the devices of a [`DeviceSet`]: the same graph, placed by a
//! [`Placement`] (balanced by weight bytes by default), each device's arena planned separately,
//! the activations copied across at each cut. Its embeddings equal one device's bit for bit on
//! devices of one backend.

use tensormem::devices::PlacedModel;
use tensormem::{DeviceSet, Placement, Result};

use super::consistency::check_ids;
use super::{Embeddings, MiniLm, MiniLmGraph, build_graph};
use crate::models::tokenize::TokenBatch;

/// A MiniLM shape compiled across a device set, with its weights bound.
pub struct PlacedMiniLm {
    /// The graph it was compiled from (input and output ids).
    pub graph: MiniLmGraph,
    /// The placed model.
    pub model: PlacedModel,
    hidden: usize,
}

impl MiniLm {
    /// Compiles the shape (`batch`, `seq`) across `set` by `placement` and binds every weight on
    /// the devices that read it (a weight read on two devices is held on both).
    ///
    /// # Errors
    /// Graph and placement errors; compile and upload errors of any device (a device whose
    /// share exceeds its budget is [`tensormem::Error::OutOfMemory`] there).
    pub fn place(
        &self,
        set: &DeviceSet,
        placement: &Placement,
        batch: usize,
        seq: usize,
    ) -> Result<PlacedMiniLm> {
        let graph = build_graph(&self.cfg, batch, seq, self.format)?;
        let mut model = set.compile(&graph.builder.graph, placement)?;
        for slot in &graph.builder.weights {
            let w = self.weights.weight(&slot.name, &slot.shape, slot.format)?;
            model.set_weight(slot.id, &w.bytes)?;
            if let (Some(id), Some(s)) = (slot.scales, &w.scales) {
                model.set_weight(id, s)?;
            }
        }
        Ok(PlacedMiniLm {
            graph,
            model,
            hidden: self.cfg.hidden_size,
        })
    }

    /// Tokenizes `sentences` into one padded batch and embeds it across `set` by `placement`.
    /// Returns the embeddings and the placed model (for its per-device report and more runs).
    ///
    /// # Errors
    /// As [`MiniLm::place`] and [`PlacedMiniLm::run`]; tokenizer errors.
    pub fn embed_placed<S: AsRef<str>>(
        &self,
        set: &DeviceSet,
        placement: &Placement,
        sentences: &[S],
    ) -> Result<(Embeddings, PlacedMiniLm)> {
        let tokens = self.tokenizer.encode_batch(sentences)?;
        check_ids(&self.cfg, &tokens)?;
        let mut placed = self.place(set, placement, tokens.batch, tokens.seq)?;
        let vectors = placed.run(&tokens)?;
        Ok((Embeddings { vectors, tokens }, placed))
    }
}

impl PlacedMiniLm {
    /// Uploads `tokens` (of this shape), runs every stage and reads the embeddings.
    ///
    /// # Errors
    /// [`tensormem::Error::SizeMismatch`] for tokens of another shape; runtime and transfer
    /// errors; a non-finite embedding.
    pub fn run(&mut self, tokens: &TokenBatch) -> Result<Vec<Vec<f32>>> {
        let g = &self.graph;
        let m = &mut self.model;
        m.set_input(g.ids, bytemuck::cast_slice(&tokens.ids))?;
        m.set_input(g.positions, bytemuck::cast_slice(&tokens.positions))?;
        m.set_input(g.type_ids, bytemuck::cast_slice(&tokens.type_ids))?;
        m.set_input(g.mask, bytemuck::cast_slice(&tokens.mask))?;
        m.run()?;
        let flat: Vec<f32> = m.read_output(g.embeddings)?;
        crate::models::checks::finite("minilm embeddings", &flat, self.hidden)?;
        Ok(flat
            .chunks_exact(self.hidden)
            .map(<[f32]>::to_vec)
            .collect())
    }
}
