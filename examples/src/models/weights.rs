//! Reading model weights from a safetensors file, checked against what the graph declares.
//!
//! The whole file is read into memory once and kept: a graph compiled for a new input shape binds
//! its weights from these bytes again (the runtime's weight store finds them by name and content
//! hash, so they are uploaded once for every shape). The bytes are handed to the runtime as they are in the file:
//! safetensors stores little-endian values, which is the layout of every target tensormem runs on
//! (checked at compile time below), so no per-element conversion or alignment copy is needed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use tensormem::{Error, Result};

#[cfg(not(target_endian = "little"))]
compile_error!("safetensors weights are little-endian and are uploaded without conversion");

/// Where one tensor's bytes lie in the file.
#[derive(Clone, Debug)]
struct Entry {
    shape: Vec<usize>,
    /// Byte range inside [`WeightFile::bytes`].
    start: usize,
    end: usize,
}

/// An f32 safetensors file held in memory, with its tensor table.
#[derive(Debug)]
pub struct WeightFile {
    path: PathBuf,
    bytes: Vec<u8>,
    /// F32 tensors by name. Tensors of other dtypes (MiniLM's I64 `embeddings.position_ids`
    /// buffer) are skipped: no graph uses them.
    entries: HashMap<String, Entry>,
}

impl WeightFile {
    /// Reads and indexes `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Malformed`] when it is not a valid
    /// safetensors file or an f32 tensor holds a NaN or infinity.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_bytes(path, bytes)
    }

    /// Indexes safetensors `bytes`; `path` only names the source in errors. Every f32 value is
    /// checked once here (a NaN or infinity in a weight turns every output into NaN; better to
    /// name the tensor than to print `null` embeddings). The scan reads each weight once, about
    /// 10 ms for MiniLM's 91 MB.
    ///
    /// # Errors
    /// [`Error::Malformed`] when `bytes` is not a valid safetensors file or an f32 tensor holds
    /// a NaN or infinity.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let malformed = |message: String| Error::Malformed {
            source_name: path.display().to_string(),
            line: 0,
            message,
        };
        let base = bytes.as_ptr() as usize;
        let mut entries = HashMap::new();
        {
            let st = SafeTensors::deserialize(&bytes)
                .map_err(|e| malformed(format!("not a safetensors file: {e}")))?;
            for (name, view) in st.tensors() {
                if view.dtype() != Dtype::F32 {
                    continue;
                }
                let data = view.data();
                if let Some(i) = data
                    .chunks_exact(4)
                    .position(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
                {
                    let c = &data[i * 4..i * 4 + 4];
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    return Err(malformed(format!(
                        "tensor '{name}' {:?} holds {v} at element {i}",
                        view.shape()
                    )));
                }
                // The view borrows `bytes`; its position is an offset into that buffer.
                let start = data.as_ptr() as usize - base;
                debug_assert!(start + data.len() <= bytes.len());
                entries.insert(
                    name,
                    Entry {
                        shape: view.shape().to_vec(),
                        start,
                        end: start + data.len(),
                    },
                );
            }
        }
        Ok(WeightFile {
            path: path.to_path_buf(),
            bytes,
            entries,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names of the f32 tensors in the file, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Number of f32 tensors in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no f32 tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The little-endian f32 bytes of tensor `name`, after checking that its shape is `shape`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the file has no f32 tensor `name`, [`Error::SizeMismatch`] when
    /// its rank or a dimension differs from `shape`.
    pub fn f32_bytes(&self, name: &str, shape: &[usize]) -> Result<&[u8]> {
        let entry = self.entries.get(name).ok_or_else(|| Error::Malformed {
            source_name: self.path.display().to_string(),
            line: 0,
            message: format!("no f32 tensor named '{name}'"),
        })?;
        if entry.shape.len() != shape.len() {
            return Err(Error::SizeMismatch {
                what: format!("rank of weight '{name}' {:?}", entry.shape),
                expected: shape.len() as u64,
                actual: entry.shape.len() as u64,
            });
        }
        for (axis, (&got, &want)) in entry.shape.iter().zip(shape).enumerate() {
            if got != want {
                return Err(Error::SizeMismatch {
                    what: format!("axis {axis} of weight '{name}' {:?}", entry.shape),
                    expected: want as u64,
                    actual: got as u64,
                });
            }
        }
        Ok(&self.bytes[entry.start..entry.end])
    }

    /// Tensor `name` as f32 values (a copy), after the checks of [`WeightFile::f32_bytes`].
    ///
    /// # Errors
    /// As [`WeightFile::f32_bytes`].
    pub fn f32_values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let bytes = self.f32_bytes(name, shape)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests;
