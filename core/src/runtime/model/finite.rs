//! The finiteness check of float weights as they stream in: a NaN or infinity in a weight turns
//! every output it feeds into a non-number, so [`Model::set_weight`](super::Model::set_weight)
//! and its variants refuse one with [`Error::NonFiniteWeight`] naming the tensor and the element.
//! Separate from the upload protocol because it is a scan of its own: it sees the bytes in the
//! caller's chunks, whose boundaries need not fall on element boundaries (an f64 element may
//! straddle two 4-byte-aligned chunks), so it carries a partial element across chunks.

use crate::ops::DType;
use crate::ops::quant::f16_to_f32;
use crate::{Error, Result};

/// Scans the little-endian elements of one weight, chunk by chunk, for the first NaN or
/// infinity. Integer dtypes pass unread.
#[derive(Debug)]
pub(super) struct FiniteScan<'a> {
    tensor: &'a str,
    dtype: DType,
    /// Whole elements already checked.
    elements: u64,
    /// The bytes of an element cut by the previous chunk's end (always fewer than one element).
    carry: Vec<u8>,
}

impl<'a> FiniteScan<'a> {
    /// A scan of weight `tensor` (its name in the graph, for the error) holding `dtype` elements.
    pub(super) fn new(tensor: &'a str, dtype: DType) -> Self {
        FiniteScan {
            tensor,
            dtype,
            elements: 0,
            carry: Vec::new(),
        }
    }

    /// The weight's name.
    pub(super) fn tensor(&self) -> &str {
        self.tensor
    }

    /// Checks the next `chunk` of the weight's bytes.
    ///
    /// # Errors
    /// [`Error::NonFiniteWeight`] at the first NaN or infinity.
    pub(super) fn feed(&mut self, mut chunk: &[u8]) -> Result<()> {
        let size = match self.dtype {
            DType::F32 | DType::F16 | DType::F64 => self.dtype.size() as usize,
            _ => return Ok(()),
        };
        if !self.carry.is_empty() {
            let take = (size - self.carry.len()).min(chunk.len());
            self.carry.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.carry.len() < size {
                return Ok(());
            }
            let whole = std::mem::take(&mut self.carry);
            self.check(&whole, size)?;
        }
        let whole = chunk.len() / size * size;
        self.check(&chunk[..whole], size)?;
        self.carry.extend_from_slice(&chunk[whole..]);
        Ok(())
    }

    /// Checks whole elements of `size` bytes and counts them.
    fn check(&mut self, bytes: &[u8], size: usize) -> Result<()> {
        for (i, e) in bytes.chunks_exact(size).enumerate() {
            let value = match self.dtype {
                DType::F16 => f16_to_f32(u16::from_le_bytes([e[0], e[1]])),
                DType::F32 => f32::from_le_bytes([e[0], e[1], e[2], e[3]]),
                _ => {
                    let v = f64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
                    if v.is_finite() {
                        continue;
                    }
                    v as f32
                }
            };
            if !value.is_finite() {
                return Err(Error::NonFiniteWeight {
                    tensor: self.tensor.to_string(),
                    element: self.elements + i as u64,
                    value,
                });
            }
        }
        self.elements += (bytes.len() / size) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
