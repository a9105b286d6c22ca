//! The two sample models, expressed as tensormem graphs of standard ops.
//!
//! * [`mnist`]: the ccexam MNIST CNN (weights committed under `assets/mnist/`).
//! * [`minilm`]: all-MiniLM-L6-v2 sentence embeddings (weights fetched by
//!   `scripts/fetch_minilm.sh` into a cache outside the repository).
//!
//! [`offload_table`] is MiniLM's offload benchmark (`minilm --offload-table`).
//!
//! Shared pieces: [`weights`] reads safetensors ([`checksum`]: the integrity of tensormem's own files), [`builder`] keeps a graph with the file names of
//! its weights, [`tokenize`] is MiniLM's word-piece glue, [`report`] prints the memory report,
//! [`host_memory`] measures the host memory of each phase of a run.

pub mod builder;
pub mod checks;
pub mod checksum;
pub mod host_memory;
pub mod llama;
pub mod minilm;
pub mod mnist;
pub mod offload_table;
pub mod quantize;
pub mod report;
pub mod tokenize;
pub mod weights;
