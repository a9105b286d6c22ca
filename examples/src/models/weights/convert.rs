//! A weight in a requested format (the file's bytes, or converted a piece of rows at a time) and
//! its upload to a model, streamed from the file.

use std::borrow::Cow;

use safetensors::Dtype;
use tensormem::ops::quant;
use tensormem::{Error, Result, WeightFormat};
#[cfg(not(target_arch = "wasm32"))]
use tensormem::{Model, TensorId};

use super::{Entry, STREAM_CHUNK, StoredWeight, WeightFile, channels_inner};
use crate::models::checks;

impl WeightFile {
    /// Tensor `name` in `format`: the file's bytes when it is stored so, else converted (f32 ⇄
    /// f16 ⇄ int8, through f32; quantising along axis 0 as [`SCALE_SUFFIX`](super::SCALE_SUFFIX)
    /// says).
    ///
    /// # Errors
    /// As `WeightFile::entry`; quantisation errors.
    pub fn weight(
        &self,
        name: &str,
        shape: &[usize],
        format: WeightFormat,
    ) -> Result<StoredWeight<'_>> {
        let entry = self.entry(name, shape)?;
        // bfloat16 (as Hugging Face checkpoints ship) is always converted.
        if entry.dtype != Dtype::BF16 && self.stored_format(name, shape)? == format {
            let scales = self
                .scales
                .get(name)
                .map(|s| Cow::Borrowed(&self.storage.bytes()[s.start..s.end]));
            return Ok(StoredWeight {
                bytes: Cow::Borrowed(&self.storage.bytes()[entry.start..entry.end]),
                scales,
                hash: Some(entry.hash),
            });
        }
        let (bytes, scales) = self
            .convert(name, entry, shape, format)
            .map_err(|e| self.context(name, e))?;
        Ok(StoredWeight {
            bytes: Cow::Owned(bytes),
            scales: format
                .has_scales()
                .then(|| Cow::Owned(bytemuck::cast_slice(&scales).to_vec())),
            hash: None,
        })
    }

    /// Tensor `name` (`entry`, of `shape`) converted to `format` (unpadded bytes, and int8
    /// scales), a piece of whole rows (about [`STREAM_CHUNK`] of the file) at a time: each piece
    /// is decoded to f32, quantised (every scale covers part of one row, so pieces of whole rows
    /// quantise exactly as the whole tensor does) and its file pages released. Host memory holds
    /// the converted tensor and one piece, never an f32 copy of the whole nor the whole mapped
    /// source (MiniLM's word embeddings are 47 MB as f32).
    ///
    /// # Errors
    /// Quantisation errors; [`Error::SizeMismatch`] for an int8 tensor whose scales are short.
    fn convert(
        &self,
        name: &str,
        entry: &Entry,
        shape: &[usize],
        format: WeightFormat,
    ) -> Result<(Vec<u8>, Vec<f32>)> {
        let stored = self.stored_format(name, shape)?;
        let all_scales: Vec<f32> = match self.scales.get(name) {
            Some(s) => bytemuck::pod_collect_to_vec(&self.storage.bytes()[s.start..s.end]),
            None => Vec::new(),
        };
        let (channels, inner) = channels_inner(shape);
        let (channels, inner) = (channels as usize, inner as usize);
        let (_, src_groups) = stored.groups(inner.max(1) as u64);
        let (_, groups) = format.groups(inner.max(1) as u64);
        let bf16 = entry.dtype == Dtype::BF16;
        let (src_size, size) = (
            if bf16 {
                2
            } else {
                stored.dtype().size() as usize
            },
            format.dtype().size() as usize,
        );
        let row_bytes = inner * src_size;
        let rows_per_piece = (STREAM_CHUNK / row_bytes.max(1)).max(1);
        let mut bytes = Vec::with_capacity(channels * inner * size);
        let mut scales = Vec::with_capacity(if format.has_scales() {
            channels * groups as usize
        } else {
            0
        });
        for r0 in (0..channels).step_by(rows_per_piece) {
            let rows = rows_per_piece.min(channels - r0);
            let (at, end) = (
                entry.start + r0 * row_bytes,
                entry.start + (r0 + rows) * row_bytes,
            );
            let piece_scales = if stored.has_scales() {
                let g = src_groups as usize;
                all_scales
                    .get(r0 * g..(r0 + rows) * g)
                    .ok_or_else(|| Error::SizeMismatch {
                        what: format!("scales of int8 weight '{name}'"),
                        expected: (channels * g) as u64,
                        actual: all_scales.len() as u64,
                    })?
            } else {
                &[][..]
            };
            let piece = &self.storage.bytes()[at..end];
            let values = if bf16 {
                checks::bf16_values(piece)
            } else {
                quant::dequantize(piece, piece_scales, rows as u64, inner as u64, stored)?
            };
            let q = quant::quantize(&values, rows as u64, inner as u64, format)?;
            // `quantize` pads each piece to whole words; the tensor is padded once, on upload.
            bytes.extend_from_slice(&q.bytes[..rows * inner * size]);
            scales.extend_from_slice(&q.scales);
            self.storage.release(at, end);
        }
        // Pages straddling two pieces were kept by each piece's release.
        self.storage.release(entry.start, entry.end);
        Ok((bytes, scales))
    }

    /// Binds weight `id` of `model` to tensor `name` of this file in `format`: a tensor stored
    /// so streams from the file in [`STREAM_CHUNK`] pieces (each piece's pages released once
    /// uploaded; nothing is read when the runtime's store already holds it), any other is
    /// converted first. `scales` receives the int8 scales.
    ///
    /// # Errors
    /// As [`WeightFile::weight`] and [`Model::set_weight_chunks`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload(
        &self,
        model: &mut Model,
        name: &str,
        shape: &[usize],
        format: WeightFormat,
        (id, scales): (TensorId, Option<TensorId>),
    ) -> Result<()> {
        let w = self.weight(name, shape, format)?;
        match (w.hash, &w.bytes) {
            (Some(hash), Cow::Borrowed(bytes)) => {
                let start = bytes.as_ptr() as usize - self.storage.bytes().as_ptr() as usize;
                let pieces = bytes.chunks(STREAM_CHUNK).enumerate().map(|(k, chunk)| {
                    // Release the previous piece: it was uploaded before this one is asked for.
                    if k > 0 {
                        let at = start + (k - 1) * STREAM_CHUNK;
                        self.storage.release(at, at + STREAM_CHUNK);
                    }
                    chunk
                });
                model.set_weight_chunks(id, hash, bytes.len() as u64, pieces)?;
                self.storage.release(start, start + bytes.len());
            }
            _ => {
                model.set_weight(id, &w.bytes)?;
            }
        }
        if let (Some(id), Some(s)) = (scales, &w.scales) {
            model.set_weight(id, s)?;
        }
        Ok(())
    }
}
