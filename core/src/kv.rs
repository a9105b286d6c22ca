//! The paged KV cache of LLM serving: a layer above the pools that stores each sequence's keys
//! and values in fixed-size blocks, shares blocks between sequences (forks, common prompt
//! prefixes) and gives memory back under pressure.
//!
//! * [`KvGeometry`] fixes the shape and the byte layout of a block.
//! * [`KvLedger`] is the bookkeeping, free of any device: block tables, reference counts,
//!   copy-on-write, the prefix cache with its LRU, preemption by swap or recomputation. The
//!   serving simulator (`tensormem-kv replay`) runs it alone.
//! * [`KvCache`] keeps the ledger's blocks in the runtime's device memory: segments from the
//!   pools, growth up to a budget, copy-on-write on the device, swaps through host memory.
//!   On wasm32 it preempts by recomputation only (swaps block, which a browser's thread may not).
//! * [`prefix`] keys full blocks by a chained hash of their tokens.
//! * [`KvLayout`](crate::ops::KvLayout) reads and writes a token in a block's bytes (f32, f16,
//!   int8 with scales), and [`attention`] computes paged attention on the host (decode and chunked prefill), the
//!   reference every kernel path is checked against.
//!
//! See ARCHITECTURE.md, "Paged KV cache", for how the pieces fit.

pub mod attention;
mod cache;
mod geometry;
mod ledger;
pub mod prefix;

pub use cache::{KvCache, KvCacheConfig, KvCacheStats};
pub use geometry::{KvDType, KvGeometry, MAX_BLOCK_TOKENS, PRESETS};
pub use ledger::{
    Admission, BlockCopy, KvLedger, KvStats, Preemption, Resumed, SeqId, SeqState, Slot,
};
pub use tensormem_contract::KvError;
