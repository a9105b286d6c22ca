//! Consistency checks between MiniLM's inputs and files: token ids against their tables, and the
//! weight file against the config (before anything is compiled or uploaded).

use tensormem::{Error, Result, WeightFormat};

use super::{BertConfig, build_graph};
use crate::models::tokenize::TokenBatch;
use crate::models::weights::WeightFile;

/// Checks every id of `tokens` against its table: word pieces against `vocab_size`, token types
/// against `type_vocab_size`, positions against `max_position_embeddings`.
pub fn check_ids(cfg: &BertConfig, tokens: &TokenBatch) -> Result<()> {
    let seq = tokens.seq.max(1);
    for (what, ids, table, field) in [
        ("token id", &tokens.ids, cfg.vocab_size, "vocab_size"),
        (
            "token type id",
            &tokens.type_ids,
            cfg.type_vocab_size,
            "type_vocab_size",
        ),
        (
            "position id",
            &tokens.positions,
            cfg.max_position_embeddings,
            "max_position_embeddings",
        ),
    ] {
        if let Some(i) = ids.iter().position(|&id| id as usize >= table) {
            let what = format!(
                "{what} (sentence {}, token {}; the tokenizer and config.json {field} disagree)",
                i / seq,
                i % seq
            );
            let e = tensormem::ArgumentError::out_of_range(what, u64::from(ids[i]), table as u64);
            return Err(e.into());
        }
    }
    Ok(())
}

/// Checks the weight file against the config: every tensor the graph declares is present with
/// its shape, and every other f32 tensor is the unused pooler.
pub fn check_weights_match(cfg: &BertConfig, weights: &WeightFile) -> Result<()> {
    let graph = build_graph(cfg, 1, 1, WeightFormat::F32)?;
    let declared: std::collections::HashSet<&str> = graph
        .builder
        .weights
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    for slot in &graph.builder.weights {
        weights.stored_format(&slot.name, &slot.shape)?;
    }
    let mut extra: Vec<&str> = weights
        .names()
        .filter(|n| !declared.contains(n) && !n.starts_with("pooler."))
        .collect();
    if extra.is_empty() {
        return Ok(());
    }
    extra.sort_unstable();
    let layers_in_file = weights
        .names()
        .filter_map(|n| {
            n.strip_prefix("encoder.layer.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |l| l + 1);
    let hint = if layers_in_file > cfg.num_hidden_layers {
        format!(
            "the weights hold {layers_in_file} encoder layers but config.json says \
             num_hidden_layers = {}",
            cfg.num_hidden_layers
        )
    } else {
        "config.json does not account for them".to_string()
    };
    Err(Error::Malformed {
        source_name: weights.path().display().to_string(),
        line: 0,
        message: format!(
            "{hint}: {} unused tensor(s), first {:?}",
            extra.len(),
            &extra[..extra.len().min(3)]
        ),
    })
}
