//! A Llama-architecture decoder over the paged KV cache (`generate`): RMSNorm, rotary position
//! embeddings, grouped-query attention, a SwiGLU MLP, tied or untied embeddings, loaded from a
//! Hugging Face–layout directory (`config.json`, `model.safetensors` or shards with their index,
//! `tokenizer.json`).
//!
//! * [`config`] reads and checks `config.json`, refusing by name what it cannot run.
//! * [`weights`] maps the safetensors files and uploads the weights (f32, f16 or int8).
//! * [`forward`] is one step over a batch of chunks ([`layer`]: one decoder layer, its
//!   intermediates guarded so an error frees them), every op a standard runtime op; keys and
//!   values go to the [`KvCache`](tensormem::kv::KvCache) with [`tensormem::Op::KvWrite`] and are
//!   read by [`tensormem::Op::PagedAttention`].
//! * [`engine`] batches [`requests`] continuously (chunked prefill, decode, preemption);
//!   [`sampler`] picks tokens; [`step_inputs`] are a step's host-built inputs.
//! * Loading, stepping and reading logits have awaitable forms (`*_async`) for the browser,
//!   which compiles these files for wasm32; the blocking forms are native only.

pub mod config;
pub mod engine;
pub mod forward;
pub mod layer;
pub mod model;
pub mod report;
pub mod requests;
pub mod sampler;
pub mod serve;
pub mod step_inputs;
pub mod synthetic;
pub mod weights;

pub use config::LlamaConfig;
pub use engine::Engine;
pub use forward::{Chunk, Decoder};
pub use model::Llama;
pub use requests::{EngineConfig, EngineStats, Event, Finish, Request};
pub use sampler::{Sampler, Sampling};
pub use weights::LlamaWeights;
