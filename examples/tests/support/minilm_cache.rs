//! The MiniLM model cache that `scripts/fetch_minilm.sh` fills, or the reason a test skips
//! without it.

use std::path::PathBuf;

use tensormem_examples::models::minilm;

/// The cached model directory, or `None` after printing `SKIP {cases}: …` and how to fill it.
pub fn model_dir(cases: &str) -> Option<PathBuf> {
    let dir = minilm::default_model_dir();
    if minilm::model_dir_ready(&dir) {
        Some(dir)
    } else {
        println!(
            "SKIP {cases}: no model cache at {} (run scripts/fetch_minilm.sh)",
            dir.display()
        );
        None
    }
}
