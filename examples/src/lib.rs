//! Shared code of the sample executables and tools: backend selection and the sample models.

pub mod backend_select;
pub mod cli;
pub mod huge_pages;
pub mod models;
pub mod serving;
