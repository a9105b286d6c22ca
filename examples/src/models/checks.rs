//! Checks that turn numbers no model should produce into errors: a NaN or infinity in weights
//! or outputs means broken weights, an overflow, or a faulty device, and printing it (JSON has no
//! NaN, so it became `null`) would hide that. Weight files are scanned with
//! [`first_non_finite`] as they are indexed.

use safetensors::Dtype;
use tensormem::ops::quant::f16_to_f32;
use tensormem::{Error, Result};

/// Fails on the first NaN or infinity in `values`, naming `what`, the row (`row_len` values per
/// row; 0 for one flat row) and the column.
///
/// # Errors
/// [`Error::Malformed`] naming the first non-finite value.
pub fn finite(what: &str, values: &[f32], row_len: usize) -> Result<()> {
    let Some(i) = values.iter().position(|v| !v.is_finite()) else {
        return Ok(());
    };
    let at = match (i.checked_div(row_len), i.checked_rem(row_len)) {
        (Some(row), Some(col)) => format!("row {row}, column {col}"),
        _ => format!("value {i}"),
    };
    Err(Error::Malformed {
        source_name: what.to_string(),
        line: 0,
        message: format!(
            "{at} is {}: the weights or the device produced a non-number",
            values[i]
        ),
    })
}

/// The first NaN or infinity of a chunk of little-endian float elements of a weight file (`None`
/// for integer dtypes), with its index in the chunk.
pub fn first_non_finite(dtype: Dtype, chunk: &[u8]) -> Option<(usize, f32)> {
    match dtype {
        Dtype::F32 => chunk
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .enumerate()
            .find(|(_, v)| !v.is_finite()),
        Dtype::F16 => chunk
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .enumerate()
            .find(|(_, v)| !v.is_finite()),
        Dtype::BF16 => chunk
            .chunks_exact(2)
            .map(|c| bf16_to_f32([c[0], c[1]]))
            .enumerate()
            .find(|(_, v)| !v.is_finite()),
        _ => None,
    }
}

/// Bytes per element of a stored dtype [`first_non_finite`] reads (1 for the others).
pub fn float_size(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        _ => 1,
    }
}

/// A little-endian bfloat16 as f32 (exact: bf16 is f32's upper half).
pub fn bf16_to_f32(b: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16)
}

/// Little-endian bfloat16 bytes as f32 values.
pub fn bf16_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| bf16_to_f32([c[0], c[1]]))
        .collect()
}

#[cfg(test)]
mod tests;
