//! # tensormem-browser: the runtime on WebGPU inside a real browser (wasm32)
//!
//! The same core (planner, pools, runtime) and the same `tensormem-wgpu` backend as natively,
//! built for `wasm32-unknown-unknown` and run by Chromium's WebGPU implementation. Two users:
//!
//! * the browser tests (`tests/conformance.rs`, `wasm-bindgen-test` in headless Chromium): the
//!   conformance suite's own cases ([`conformance`]), awaited on the page's event loop;
//! * the sample pages (`examples/web/`): [`page::run_mnist`] (`index.html`),
//!   [`minilm_page::run_minilm`] (`minilm.html`) and [`generate_page::run_generate`]
//!   (`generate.html`, text generation over the paged KV cache) fetch nothing themselves; the
//!   pages pass the weights, images, config and tokenizer they fetched from the same origin.
//!
//! ## Design choices
//!
//! * **Only the awaitable forms exist here.** `Backend::wait`, `Runtime::download` and every other
//!   blocking form are not compiled for `wasm32` (a compile error, not a runtime panic): a browser's
//!   main thread must return to its event loop for WebGPU's promises to resolve.
//! * **Cases are reused, not forked.** The conformance cases are `async fn`s that wait only through
//!   `tensormem_conformance::Ctx`; natively they run in both completion modes, here in the
//!   awaitable mode.
//! * **The samples' graphs are the native samples'.** [`models`] compiles the files of
//!   `tensormem-examples` that build the MNIST and MiniLM graphs, read their weights and tokenize
//!   (the same source files, not copies; MiniLM's tokenizer is the `tokenizers` crate, as
//!   natively), so the pages run the same graphs with the same memory plans.
//! * **Empty natively.** Everything is `wasm32`-only, so native builds and clippy pay nothing.
//!
//! ## Limits
//!
//! * Natively the wgpu backend turns out-of-memory into a retryable error at the failing call; in
//!   a browser error scopes resolve as promises, so such errors surface on the next call instead.
//! * Cases that need threads or blocking waits (guard margins) run natively only; see
//!   [`tensormem_conformance::Case::native_only`].

// Natively the crate is empty, so the module doc's links resolve only in the wasm32 docs.
#![cfg_attr(not(target_arch = "wasm32"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(target_arch = "wasm32")]
pub mod conformance;
#[cfg(target_arch = "wasm32")]
pub mod generate_page;
#[cfg(target_arch = "wasm32")]
pub mod minilm_page;
#[cfg(target_arch = "wasm32")]
pub mod models;
#[cfg(target_arch = "wasm32")]
pub mod page;
