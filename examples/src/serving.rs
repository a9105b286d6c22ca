//! The KV serving simulator behind `tensormem-kv replay`: a request trace in the Azure format
//! replayed with continuous batching against several KV memory policies (tensormem's paged cache,
//! the same with vLLM's defaults, and two contiguous designs), in one process, on the same
//! trace and budget.

pub mod contiguous;
pub mod paged;
pub mod policy;
pub mod report;
pub mod sim;
pub mod trace;
