//! MiniLM's graph and its consistency checks (token ids against the tables, the weight file
//! against the config), from the native sample's `minilm/` files, so that the page runs the
//! graph the native `minilm` runs and refuses what it refuses.

#[rustfmt::skip]
#[path = "../../../examples/src/models/minilm/consistency.rs"]
mod consistency;
// The page builds the plain graph: the tiling the native sample offers under a budget is unused.
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../../examples/src/models/minilm/graph.rs"]
mod graph;

pub use consistency::{check_ids, check_weights_match};
pub use graph::{BertConfig, MiniLmGraph, build_graph, cosine_matrix};
