//! The Llama decoder of `generate` (loading, step inputs, forward pass, engine, sampler): the
//! files of `tensormem-examples`, compiled here as they are, in their awaitable forms. The
//! native-only CLI pieces (report, serving simulation, synthetic checkpoints) stay out.

#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/config.rs"]
pub mod config;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/engine.rs"]
pub mod engine;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/forward.rs"]
pub mod forward;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/layer.rs"]
pub mod layer;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/model.rs"]
pub mod model;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/requests.rs"]
pub mod requests;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/sampler.rs"]
pub mod sampler;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/step_inputs.rs"]
pub mod step_inputs;
#[rustfmt::skip]
#[path = "../../../examples/src/models/llama/weights.rs"]
pub mod weights;

pub use engine::Engine;
pub use model::Llama;
pub use requests::{EngineConfig, Event, Finish, Request};
pub use sampler::Sampling;
