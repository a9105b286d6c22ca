//! The MNIST sample's graph builder and weight reader: the source files of `tensormem-examples`,
//! compiled here as they are (its command-line tools and MiniLM stay native). `rustfmt::skip`:
//! those files are formatted as part of `tensormem-examples` (and rustfmt would resolve their
//! test modules relative to this crate).

#[rustfmt::skip]
#[path = "../../examples/src/models/builder.rs"]
pub mod builder;
// The native-only `Mnist` wrapper is compiled out here, leaving some of its imports unused.
#[allow(unused_imports, reason = "the native-only Mnist wrapper uses them")]
#[rustfmt::skip]
#[path = "../../examples/src/models/mnist.rs"]
pub mod mnist;
#[rustfmt::skip]
#[path = "../../examples/src/models/weights.rs"]
pub mod weights;
