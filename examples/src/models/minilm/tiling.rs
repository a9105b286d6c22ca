//! How a shape's attention and feed-forward blocks are tiled under a device budget: a fixed
//! count each, or the search that [`Chunks::Auto`] runs.
//!
//! The search starts untiled and compiles; while the compile is refused because an op's working
//! set exceeds the budget (or a view is off the binding alignment), it tiles further the block
//! that op belongs to: the next feed-forward count when the op is in a feed-forward block, else
//! the next attention count (then the next feed-forward count once attention is at its most).
//! Feed-forward counts whose chunks would not be bit-identical are skipped (the builder refuses
//! them). So the result is the fewest chunks that fit, attention before feed-forward, and a budget
//! no tiling meets is refused with the op and bytes of the last attempt.

use tensormem::{Error, Model, Result};

use super::{
    MiniLm, MiniLmGraph, Tiling, attention_chunk_counts, build_graph, build_graph_tiled,
    ffn_chunk_counts,
};
use crate::cli::DeviceBudget;

/// How many chunks a block of every layer is tiled into ([`build_graph_tiled`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Chunks {
    /// This many (for attention a divisor of the batch; [`attention_chunk_counts`]; for the
    /// feed-forward block a divisor of `batch·seq`; [`ffn_chunk_counts`]).
    Fixed(u32),
    /// One without a device budget; with one, the fewest chunks that fit (module doc).
    Auto,
}

/// The attention's chunks (the name the CLI and earlier code use).
pub type AttentionChunks = Chunks;

impl Chunks {
    /// Parses `--attention-chunks` / `--ffn-chunks`: `auto` or a count of at least 1.
    ///
    /// # Errors
    /// A message for clap.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Chunks::Auto),
            n => match n.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Chunks::Fixed(n)),
                _ => Err(format!(
                    "'{s}' is neither 'auto' nor a chunk count of at least 1"
                )),
            },
        }
    }

    /// The counts to try: the fixed one, one without a budget, else `all`.
    fn counts(self, budgeted: bool, all: Vec<u32>) -> Vec<u32> {
        match (self, budgeted) {
            (Chunks::Fixed(n), _) => vec![n],
            (Chunks::Auto, false) => vec![1],
            (Chunks::Auto, true) => all,
        }
    }
}

/// Whether the op labelled `label` belongs to a feed-forward block (`encoder.layer.N.` then
/// `intermediate.`, `gelu` or `output.`; not `attention.output.`).
fn in_feed_forward(label: &str) -> bool {
    let rest = label
        .strip_prefix("encoder.layer.")
        .and_then(|r| r.split_once('.'))
        .map_or("", |(_, r)| r);
    ["intermediate.", "gelu", "output."]
        .iter()
        .any(|p| rest.starts_with(p))
}

impl MiniLm {
    /// Builds and compiles shape (`batch`, `seq`) tiled as the chunk settings ask (module doc). A
    /// percentage budget is of the untiled graph's need, whatever the tiling.
    pub(super) fn compile_shape(
        &self,
        batch: usize,
        seq: usize,
    ) -> Result<(MiniLmGraph, Model, Tiling)> {
        let budgeted = self.budget.is_some();
        let attn = self.chunks.counts(budgeted, attention_chunk_counts(batch));
        let ffn = self
            .ffn_chunks
            .counts(budgeted, ffn_chunk_counts(batch, seq));
        let budget = match self.budget {
            Some(p @ DeviceBudget::Percent(_)) => {
                let g = build_graph(&self.cfg, batch, seq, self.format)?;
                let need = self.rt.memory_need(&g.builder.graph)?;
                Some(DeviceBudget::Bytes(
                    p.resolve(need.unbudgeted_device_bytes()),
                ))
            }
            other => other,
        };
        let auto_ffn = ffn.len() > 1;
        let (mut i, mut j) = (0, 0);
        let mut refused = None;
        loop {
            let tiling = Tiling {
                attention: attn[i],
                ffn: ffn[j],
                staged: false,
            };
            let graph = match build_graph_tiled(&self.cfg, batch, seq, self.format, tiling) {
                Ok(g) => g,
                // A feed-forward count whose chunks would round differently: the next one.
                Err(
                    Error::Graph(tensormem::GraphError::Untileable { .. }) | Error::Argument(_),
                ) if auto_ffn && j + 1 < ffn.len() => {
                    j += 1;
                    continue;
                }
                Err(e) => return Err(refused.unwrap_or(e)),
            };
            let compiled = crate::cli::compile_scored(
                &self.rt,
                &graph.builder.graph,
                budget,
                &self.scores,
                self.compile_options(),
            );
            let ffn_op = match compiled {
                Ok(model) if budgeted && tiling != Tiling::NONE => {
                    return self.staged_if_cheaper(batch, seq, budget, (graph, model, tiling));
                }
                Ok(model) => return Ok((graph, model, tiling)),
                Err(e) => {
                    let ffn_op = match &e {
                        Error::BudgetBelowWorkingSet { op, .. } => in_feed_forward(op),
                        Error::Misaligned { .. } => false,
                        _ => return Err(e),
                    };
                    refused = Some(e);
                    ffn_op
                }
            };
            let (more_attn, more_ffn) = (i + 1 < attn.len(), j + 1 < ffn.len());
            if ffn_op && more_ffn {
                j += 1;
            } else if more_attn {
                i += 1;
            } else if more_ffn {
                j += 1;
            } else {
                break;
            }
        }
        Err(refused
            .unwrap_or_else(|| tensormem::ArgumentError::zero("minilm: tilings to try").into()))
    }

    fn compile_options(&self) -> crate::cli::CompileOptions {
        crate::cli::CompileOptions {
            transfer_lane: self.transfer_lane,
            recompute: self.recompute,
            rates: self.rates,
        }
    }

    /// The tiling found, or the same staged when that compiles within the budget with a lower
    /// predicted stall, then fewer bytes moved per run (staged slices leave and come back one at
    /// a time).
    fn staged_if_cheaper(
        &self,
        batch: usize,
        seq: usize,
        budget: Option<DeviceBudget>,
        found: (MiniLmGraph, Model, Tiling),
    ) -> Result<(MiniLmGraph, Model, Tiling)> {
        // The winning schedule's predicted stall, then its bytes moved per run (the planner's
        // own order between schedules).
        let cost = |m: &Model| {
            m.memory_report().offload.and_then(|o| {
                o.outcomes
                    .iter()
                    .filter(|x| x.peak.is_some())
                    .map(|x| (x.predicted_stall, x.bytes_to_device + x.bytes_to_host))
                    .min()
            })
        };
        if cost(&found.1).is_none_or(|(_, bytes)| bytes == 0) {
            return Ok(found);
        }
        let tiling = Tiling {
            staged: true,
            ..found.2
        };
        let graph = build_graph_tiled(&self.cfg, batch, seq, self.format, tiling)?;
        let staged = crate::cli::compile_scored(
            &self.rt,
            &graph.builder.graph,
            budget,
            &self.scores,
            self.compile_options(),
        );
        match staged {
            Ok(model) if cost(&model) < cost(&found.1) => Ok((graph, model, tiling)),
            _ => Ok(found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_forward_ops_are_told_from_attention_ones() {
        for ffn in [
            "encoder.layer.0.intermediate.dense",
            "encoder.layer.5.gelu.part3",
            "encoder.layer.2.output.dense.part0",
            "encoder.layer.2.output.LayerNorm",
        ] {
            assert!(in_feed_forward(ffn), "{ffn}");
        }
        for other in [
            "encoder.layer.0.attention.output.dense",
            "encoder.layer.1.probs.part2",
            "encoder.layer.1.query.split_heads",
            "mean_pool",
        ] {
            assert!(!in_feed_forward(other), "{other}");
        }
    }

    #[test]
    fn chunks_parse_auto_or_a_count() {
        assert_eq!(Chunks::parse("auto"), Ok(Chunks::Auto));
        assert_eq!(Chunks::parse("4"), Ok(Chunks::Fixed(4)));
        assert!(Chunks::parse("0").is_err());
    }
}
