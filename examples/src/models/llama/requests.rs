//! What the batching [`Engine`](super::engine::Engine) takes and gives: requests, its
//! configuration, the events of a step and the counters of a run.

use super::sampler::Sampling;

/// One generation request.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids (BOS included when the tokenizer adds it).
    pub prompt: Vec<u32>,
    /// Most tokens to generate (at least 1).
    pub max_new_tokens: usize,
    /// Token choice.
    pub sampling: Sampling,
    /// Tokens that end the request (generated, then the request stops).
    pub stop: Vec<u32>,
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop token was generated.
    Stop,
    /// `max_new_tokens` were generated.
    Length,
    /// The model's context is full.
    Context,
}

/// What a step produced for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Request `id` left the queue and joined the running batch.
    Admitted {
        /// The request.
        id: usize,
    },
    /// Request `id` generated `token`.
    Token {
        /// The request (the index [`Engine::add`](super::engine::Engine::add) returned).
        id: usize,
        /// The token.
        token: u32,
    },
    /// Request `id` ended.
    Finished {
        /// The request.
        id: usize,
        /// Why.
        finish: Finish,
    },
}

/// How the engine batches.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Most tokens computed per step (decode tokens and prefill chunks together).
    pub step_tokens: usize,
    /// Salt of the prefix cache (requests share prefixes only under one salt).
    pub salt: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            step_tokens: 256,
            salt: 0,
        }
    }
}

/// Counters of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Forward steps.
    pub steps: u64,
    /// Prompt tokens computed (prefix hits and recomputation excluded).
    pub prefill_tokens: u64,
    /// Tokens computed again after a preemption.
    pub recomputed_tokens: u64,
    /// Decode tokens computed.
    pub decode_tokens: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Seconds in prefill-only steps, and in steps with decode tokens.
    pub prefill_secs: f64,
    /// Seconds in steps with decode tokens.
    pub decode_secs: f64,
    /// Largest running batch.
    pub max_batch: usize,
    /// Most KV blocks in use at once.
    pub peak_kv_blocks: usize,
    /// Key and value bytes the decode tokens' attention read (every visible position, every
    /// layer): with `decode_secs`, the KV read bandwidth of decoding.
    pub decode_kv_bytes: u64,
}
