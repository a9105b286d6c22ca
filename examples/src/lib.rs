//! Shared code of the sample executables and tools.

pub mod models;
