//! The sample models' graphs, graph builder, weight reader, MiniLM's tokenizer glue and the
//! Llama decoder: the source files of `tensormem-examples`, compiled here as they are (its tools,
//! image decoding and blocking drivers stay native). `rustfmt::skip`: those files are formatted as part of
//! `tensormem-examples` (and rustfmt would resolve their test modules relative to this crate).

// The native-only `upload_weights` is compiled out here, leaving two of its imports unused.
#[allow(unused_imports, reason = "the native-only upload_weights uses them")]
#[rustfmt::skip]
#[path = "../../examples/src/models/builder.rs"]
pub mod builder;
#[rustfmt::skip]
#[path = "../../examples/src/models/checks.rs"]
pub mod checks;
#[rustfmt::skip]
#[path = "../../examples/src/models/checksum.rs"]
pub mod checksum;
pub mod llama;
pub mod minilm;
#[rustfmt::skip]
#[path = "../../examples/src/models/mnist/graph.rs"]
pub mod mnist;
#[rustfmt::skip]
#[path = "../../examples/src/models/tokenize.rs"]
pub mod tokenize;
#[rustfmt::skip]
#[path = "../../examples/src/models/weights.rs"]
pub mod weights;
