//! Refusals of a graph or a compiled model's tensors: a tensor used in a role its kind does not
//! have (setting an intermediate, writing into an input), one with no storage to read, and an op
//! chain the tiling pass cannot split.

/// A tensor used against its kind or place in the graph. Hopeless as given: use another tensor,
/// or declare this one differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// A call that takes one kind of tensor (an input to set, a weight to bind) given another.
    #[error("'{tensor}' is a {kind:?}, not a {expected:?}")]
    WrongKind {
        /// The tensor's name.
        tensor: String,
        /// Its kind.
        kind: crate::TensorKind,
        /// The kind the call takes.
        expected: crate::TensorKind,
    },

    /// A host write to a view of part of a tensor: the host sets whole tensors.
    #[error("'{tensor}' is a view of part of '{root}': the host sets the whole tensor")]
    PartialView {
        /// The view's name.
        tensor: String,
        /// The tensor it views.
        root: String,
    },

    /// A run that reads a weight never bound.
    #[error("weight '{tensor}' is not set: upload it with Model::set_weight before running")]
    WeightNotSet {
        /// The weight's name.
        tensor: String,
    },

    /// A read of a tensor that the model keeps no bytes for.
    #[error("tensor {tensor} has no storage {scope} ({why})")]
    NoStorage {
        /// The tensor's root index in its graph.
        tensor: usize,
        /// Where it has none ("in this model", "between runs in this budgeted model").
        scope: &'static str,
        /// Why ("never written nor read", "an intermediate, or never used").
        why: &'static str,
    },

    /// An op written into a tensor that is not a view or reshape of an intermediate (inputs and
    /// weights are set by the host; a root is written by its own op).
    #[error(
        "{label}: an op writes into a view or reshape of an intermediate, not '{tensor}' \
         (a {kind:?}{})",
        if *.root { " root" } else { "" }
    )]
    NotAnIntermediateView {
        /// The op's label.
        label: String,
        /// The tensor written.
        tensor: String,
        /// Its kind.
        kind: crate::TensorKind,
        /// Whether it is a root (not a view).
        root: bool,
    },

    /// An op chain the tiling pass cannot split into parts.
    #[error("tile: op '{label}' ({op}) {reason}")]
    Untileable {
        /// The op's label.
        label: String,
        /// The op's name.
        op: &'static str,
        /// Which rule of the pass it breaks.
        reason: String,
    },
}
