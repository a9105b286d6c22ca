//! What a tensor is to its graph; the graph errors name it.

/// What a tensor is to its graph.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// Set by the caller before each run.
    Input,
    /// Set once, kept across runs (model parameters).
    Weight,
    /// Produced by a node.
    Intermediate,
}
