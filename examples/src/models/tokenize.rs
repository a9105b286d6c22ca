//! Tokenizer glue for MiniLM: text to padded id, position, type and mask arrays.
//!
//! Uses the `tokenizers` crate on the shipped `tokenizer.json` (WordPiece, BERT normaliser,
//! lowercase). That file bakes in fixed padding to 128 and truncation at 128; both are replaced
//! here: no tokenizer padding (the batch is padded to its longest sentence below) and truncation
//! at [`MAX_TOKENS`], the `max_seq_length` of sentence-transformers' config, so long inputs embed
//! as the reference pipeline embeds them.

#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use tensormem::{Error, Result};
use tokenizers::{Tokenizer, TruncationParams};

/// Longest token sequence, special tokens included (sentence-transformers' `max_seq_length`).
pub const MAX_TOKENS: usize = 256;

/// Token id of `[PAD]`, used for the padded tail of shorter sentences (masked out everywhere).
pub const PAD_ID: u32 = 0;

/// A batch of sentences, tokenized and padded to the longest one.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBatch {
    /// Sentences.
    pub batch: usize,
    /// Tokens per sentence after padding (the longest sentence's length).
    pub seq: usize,
    /// Word-piece ids, `[batch, seq]`, padded with [`PAD_ID`].
    pub ids: Vec<u32>,
    /// Position ids, `[batch, seq]`: `0..seq` for every sentence.
    pub positions: Vec<u32>,
    /// Token type ids, `[batch, seq]` (all 0 for single sentences).
    pub type_ids: Vec<u32>,
    /// Attention mask, `[batch, seq]`: 1.0 for real tokens, 0.0 for padding.
    pub mask: Vec<f32>,
    /// Real tokens per sentence.
    pub lengths: Vec<usize>,
}

/// The MiniLM word-piece tokenizer.
pub struct WordPiece {
    inner: Tokenizer,
    source: String,
}

impl WordPiece {
    /// Loads `tokenizer.json`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the file cannot be read or parsed.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &Path) -> Result<Self> {
        let source = path.display().to_string();
        let json = std::fs::read(path).map_err(|e| Error::Malformed {
            source_name: source.clone(),
            line: 0,
            message: format!("tokenizer: {e}"),
        })?;
        Self::from_bytes(&json, &source)
    }

    /// Parses the text of a `tokenizer.json` (the browser sample fetches it); `source` names it
    /// in errors.
    ///
    /// # Errors
    /// [`Error::Malformed`] when `json` is not a tokenizer.
    pub fn from_bytes(json: &[u8], source: &str) -> Result<Self> {
        let malformed = |message: String| Error::Malformed {
            source_name: source.to_string(),
            line: 0,
            message,
        };
        let mut inner =
            Tokenizer::from_bytes(json).map_err(|e| malformed(format!("tokenizer: {e}")))?;
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| malformed(format!("tokenizer truncation: {e}")))?;
        Ok(WordPiece {
            inner,
            source: source.to_string(),
        })
    }

    /// Token ids of one sentence, with `[CLS]` and `[SEP]`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the tokenizer fails on the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| Error::Malformed {
                source_name: self.source.clone(),
                line: 0,
                message: format!("tokenizing {text:?}: {e}"),
            })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Tokenizes `sentences` and pads them to the longest.
    ///
    /// # Errors
    /// [`tensormem::ArgumentError::Zero`] for an empty batch; as [`WordPiece::encode`].
    pub fn encode_batch<S: AsRef<str>>(&self, sentences: &[S]) -> Result<TokenBatch> {
        if sentences.is_empty() {
            return Err(tensormem::ArgumentError::zero("minilm: sentences to embed").into());
        }
        let encoded = sentences
            .iter()
            .map(|s| self.encode(s.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(pad_batch(&encoded))
    }
}

/// Pads already-tokenized sentences to the longest one and builds the side arrays.
pub fn pad_batch(encoded: &[Vec<u32>]) -> TokenBatch {
    let batch = encoded.len();
    let seq = encoded.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut tb = TokenBatch {
        batch,
        seq,
        ids: vec![PAD_ID; batch * seq],
        positions: Vec::with_capacity(batch * seq),
        type_ids: vec![0; batch * seq],
        mask: vec![0.0; batch * seq],
        lengths: encoded.iter().map(Vec::len).collect(),
    };
    for (b, ids) in encoded.iter().enumerate() {
        tb.ids[b * seq..b * seq + ids.len()].copy_from_slice(ids);
        tb.mask[b * seq..b * seq + ids.len()].fill(1.0);
        tb.positions.extend(0..seq as u32);
    }
    tb
}

#[cfg(test)]
mod tests;
