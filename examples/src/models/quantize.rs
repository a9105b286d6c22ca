//! Converting a safetensors weight file to f16 or int8 (the `tensormem-quantize` tool's work),
//! with each tensor's size and error reported.
//!
//! The output follows the convention [`WeightFile`] reads (see its module constants): every
//! tensor of rank 2 or more (linear and convolution weights, embedding tables) is stored in the
//! new format under its own name; int8 adds `NAME.scale` (F32, `[shape[0], groups]`, axis 0 the
//! output channel); vectors (biases, norm parameters) stay f32, as the samples read them. The
//! metadata records the format and the int8 group size, so a loader never guesses them, and the
//! format version and a [`checksum`] of every tensor, which the loader verifies.

use std::collections::HashMap;

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use tensormem::ops::quant;
use tensormem::{Error, Result, WeightFormat};

use super::checksum::{self, file_checksum};
use super::weights::{META_FORMAT, META_GROUP, SCALE_SUFFIX, WeightFile, channels_inner};

/// What happened to one tensor. Sizes in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorReport {
    /// Tensor name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Stored format in the output ("f32" for a vector kept as is).
    pub format: &'static str,
    /// Bytes in the input file.
    pub bytes_in: u64,
    /// Bytes in the output file, scales included.
    pub bytes_out: u64,
    /// Largest `|w − ŵ|` against the input's values.
    pub max_abs_error: f32,
    /// `‖w − ŵ‖₂ / ‖w‖₂` (0 for an all-zero tensor stored exactly).
    pub relative_rms_error: f64,
}

/// Converts every weight of `file` to `format` (vectors stay f32). Returns the safetensors
/// bytes of the new file and one report per tensor, sorted by name.
///
/// # Errors
/// [`tensormem::ArgumentError::Invalid`] for `--format f32` (nothing to do) and quantisation errors
/// (non-finite values are refused when the file is read).
pub fn quantize_file(
    file: &WeightFile,
    format: WeightFormat,
) -> Result<(Vec<u8>, Vec<TensorReport>)> {
    if format == WeightFormat::F32 {
        return Err(tensormem::ArgumentError::invalid_value(
            "quantize target format",
            "f32",
            "f16 or int8",
        )
        .into());
    }
    let mut names: Vec<String> = file.names().map(str::to_string).collect();
    names.sort_unstable();
    let mut out: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut reports = Vec::with_capacity(names.len());
    for name in names {
        let shape = file.shape(&name)?;
        let values = file.f32_values(&name, &shape)?;
        let bytes_in = file.stored_bytes(&name)?;
        let (channels, inner) = channels_inner(&shape);
        let target = if shape.len() >= 2 {
            format
        } else {
            WeightFormat::F32
        };
        let q = quant::quantize(&values, channels, inner, target)?;
        let back = quant::dequantize(&q.bytes, &q.scales, channels, inner, target)?;
        let (mut max_abs, mut err2, mut norm2) = (0f32, 0f64, 0f64);
        for (v, b) in values.iter().zip(&back) {
            max_abs = max_abs.max((v - b).abs());
            err2 += f64::from(v - b).powi(2);
            norm2 += f64::from(*v).powi(2);
        }
        let mut bytes = q.bytes;
        bytes.truncate((values.len() as u64 * target.dtype().size()) as usize);
        let dtype = match target {
            WeightFormat::F32 => Dtype::F32,
            WeightFormat::F16 => Dtype::F16,
            WeightFormat::Int8 { .. } | WeightFormat::Int8Dynamic { .. } => Dtype::I8,
        };
        let mut bytes_out = bytes.len() as u64;
        if target.has_scales() {
            let (_, groups) = target.groups(inner.max(1));
            let scales: Vec<u8> = bytemuck::cast_slice(&q.scales).to_vec();
            bytes_out += scales.len() as u64;
            out.push((
                format!("{name}{SCALE_SUFFIX}"),
                Dtype::F32,
                vec![channels as usize, groups as usize],
                scales,
            ));
        }
        out.push((name.clone(), dtype, shape.clone(), bytes));
        reports.push(TensorReport {
            name,
            shape,
            format: target.name(),
            bytes_in,
            bytes_out,
            max_abs_error: max_abs,
            relative_rms_error: if norm2 > 0.0 {
                (err2 / norm2).sqrt()
            } else {
                0.0
            },
        });
    }
    let views = out
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Malformed {
                    source_name: format!("quantized tensor '{name}'"),
                    line: 0,
                    message: e.to_string(),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let sum = file_checksum(out.iter().map(|(name, dtype, shape, bytes)| {
        (name.as_str(), *dtype, &shape[..], crc32fast::hash(bytes))
    }));
    let mut meta: HashMap<String, String> = checksum::metadata(sum).into_iter().collect();
    meta.insert(META_FORMAT.to_string(), format.name().to_string());
    if let WeightFormat::Int8 { group } = format {
        meta.insert(META_GROUP.to_string(), group.to_string());
    }
    let bytes =
        safetensors::tensor::serialize(views, Some(meta)).map_err(|e| Error::Malformed {
            source_name: "quantized weight file".into(),
            line: 0,
            message: e.to_string(),
        })?;
    Ok((bytes, reports))
}

#[cfg(test)]
mod tests;
