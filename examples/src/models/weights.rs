//! Reading model weights from a safetensors file, checked against what the graph declares.
//!
//! **Loading without a second copy.** [`WeightFile::open`] memory-maps the file instead of reading
//! it: the bytes stay in the page cache, and each pass over a tensor (the finiteness check and
//! content hash at open, the upload later) walks it in [`STREAM_CHUNK`] pieces and drops each
//! piece's pages from the process (`MADV_DONTNEED`) once it is done with them. The upload streams
//! the same pieces through the runtime's staging belt ([`Model::set_weight_chunks`]), so host
//! memory never holds the model twice (file + staging copy) and the process's peak RSS stays
//! about one chunk above what the device itself needs. A graph compiled for a new input shape
//! binds its weights by name and the hash taken at open: the runtime's weight store already holds
//! them, so nothing is read again. The bytes are handed to the runtime as they are in the file:
//! safetensors stores little-endian values, which is the layout of every target tensormem runs on
//! (checked at compile time below), so no per-element conversion or alignment copy is needed.
//!
//! The browser sample compiles this file too (`tensormem-browser`): there only
//! [`WeightFile::from_bytes`] exists (the page fetches the file; nothing is mapped) and weights
//! are bound with the runtime's awaitable uploads, not [`WeightFile::upload`], which blocks.
//!
//! [`Model::set_weight_chunks`]: tensormem::Model::set_weight_chunks

// Paths relative to this file's folder: the browser crate includes this file by path, where
// its children would otherwise be looked for beside it.
#[path = "weights/convert.rs"]
mod convert;
#[path = "weights/index.rs"]
mod index;
#[path = "weights/storage.rs"]
mod storage;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[cfg(not(target_arch = "wasm32"))]
use memmap2::Mmap;

use safetensors::Dtype;
use tensormem::ops::quant;
use tensormem::{Error, Result, WeightFormat};

use super::checks;
use storage::Storage;

/// Metadata key of a quantized file's format ("f16" or "int8"), written by `tensormem-quantize`.
pub const META_FORMAT: &str = "tensormem.format";
/// Metadata key of an int8 file's group size (inner elements per scale; "0": per channel).
pub const META_GROUP: &str = "tensormem.group";
/// Bytes per piece when a mapped tensor is scanned or streamed (and its pages then released).
pub const STREAM_CHUNK: usize = tensormem::runtime::WEIGHT_CHUNK_BYTES;

/// Suffix of an int8 tensor's scales: tensor `NAME` (I8) has its scales in `NAME.scale` (F32,
/// `[shape[0], groups]`: axis 0 is the output channel, groups run along the rest of the row).
pub const SCALE_SUFFIX: &str = ".scale";

#[cfg(not(target_endian = "little"))]
compile_error!("safetensors weights are little-endian and are uploaded without conversion");

/// Where one tensor's bytes lie in the file.
#[derive(Clone, Debug)]
struct Entry {
    /// F32, F16 or I8.
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range inside the file.
    start: usize,
    end: usize,
    /// Content hash of the range ([`WeightHasher`](tensormem::runtime::WeightHasher)), taken at
    /// open.
    hash: u64,
}

/// A safetensors file of weights held in memory, with its tensor table: f32 tensors, or the f16 /
/// int8 tensors `tensormem-quantize` writes (module constants name the convention).
#[derive(Debug)]
pub struct WeightFile {
    path: PathBuf,
    storage: Storage,
    /// F32, F16 and I8 tensors by name, scales excluded. Tensors of other dtypes (MiniLM's I64
    /// `embeddings.position_ids` buffer) are skipped: no graph uses them.
    entries: HashMap<String, Entry>,
    /// The scales of each I8 tensor, by the I8 tensor's name.
    scales: HashMap<String, Entry>,
    /// Group size of the I8 tensors ([`META_GROUP`]; 0 = per channel).
    group: u32,
}

/// A weight's bytes in a requested format: borrowed from the file when stored so, else converted.
#[derive(Debug)]
pub struct StoredWeight<'a> {
    /// The weight operand's bytes (unpadded).
    pub bytes: Cow<'a, [u8]>,
    /// Int8 scales as f32 bytes (`None` for f32 and f16).
    pub scales: Option<Cow<'a, [u8]>>,
    /// The content hash of `bytes` when they are the file's (taken at open).
    pub hash: Option<u64>,
}

impl WeightFile {
    /// Maps and indexes `path` (module doc: the file stays in the page cache; its pages are
    /// dropped from the process as each tensor is scanned). The file must not be modified or
    /// truncated while the returned value lives (as for any mapped file).
    ///
    /// # Errors
    /// [`Error::Io`] when the path is a directory or the file cannot be opened or mapped,
    /// [`Error::Malformed`] when it is not a valid safetensors file, a float tensor holds a NaN
    /// or infinity, or a tensormem file fails its [`checksum`](super::checksum) (or predates it).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        refuse_directory(path)?;
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: a read-only mapping of a file this process does not write; the contract above
        // (the file is not modified while mapped) is the caller's, as for every mmap'd input.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::index(path, Storage::Mapped(map))
    }

    /// Drops from the process the resident pages of `bytes`, a slice this file lent (a tensor's
    /// stored bytes, once uploaded): the page cache keeps them, and a later read faults them
    /// back in with the same contents. A slice from elsewhere, or a file read into memory, is
    /// left alone.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn release_pages(&self, bytes: &[u8]) {
        let base = self.storage.bytes().as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).wrapping_sub(base);
        if start <= self.storage.bytes().len() && bytes.len() <= self.storage.bytes().len() - start
        {
            self.storage.release(start, start + bytes.len());
        }
    }

    /// Reads `path` whole into memory and indexes it: the loading path before mapping, kept to
    /// measure what mapping saves (`minilm --load read`).
    ///
    /// # Errors
    /// As [`WeightFile::open`].
    pub fn read(path: &Path) -> Result<Self> {
        refuse_directory(path)?;
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
    /// [`Error::Malformed`] when `bytes` is not a valid safetensors file, an f32 tensor holds
    /// a NaN or infinity, or a tensormem file fails its [`checksum`](super::checksum) (or
    /// predates it).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        Self::index(path, Storage::Owned(bytes))
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names of the weights in the file (f32, f16 and int8 tensors; int8 scales are part of
    /// their tensor), in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Number of weights in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no weight.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The shape of weight `name`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the file has no weight `name`.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        self.entries
            .get(name)
            .map(|e| e.shape.clone())
            .ok_or_else(|| self.missing(name))
    }

    /// Bytes weight `name` takes in the file, int8 scales included.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the file has no weight `name`.
    pub fn stored_bytes(&self, name: &str) -> Result<u64> {
        let e = self.entries.get(name).ok_or_else(|| self.missing(name))?;
        let scales = self.scales.get(name).map_or(0, |s| s.end - s.start);
        Ok((e.end - e.start + scales) as u64)
    }

    fn missing(&self, name: &str) -> Error {
        Error::Malformed {
            source_name: self.path.display().to_string(),
            line: 0,
            message: format!("no weight named '{name}'"),
        }
    }

    /// The format tensor `name` is stored in (int8 with the file's group size; bfloat16, which
    /// is always converted, counts as f32).
    ///
    /// # Errors
    /// As `WeightFile::entry`.
    pub fn stored_format(&self, name: &str, shape: &[usize]) -> Result<WeightFormat> {
        Ok(match self.entry(name, shape)?.dtype {
            Dtype::F16 => WeightFormat::F16,
            Dtype::I8 => WeightFormat::Int8 { group: self.group },
            _ => WeightFormat::F32,
        })
    }

    /// Tensor `name` (any stored format) after checking that its shape is `shape`.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the file has no weight `name`, [`Error::SizeMismatch`] when its
    /// rank or a dimension differs from `shape`.
    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry> {
        let entry = self.entries.get(name).ok_or_else(|| self.missing(name))?;
        if entry.shape.len() != shape.len() {
            return Err(Error::SizeMismatch {
                what: format!(
                    "rank of weight '{name}' {:?} in {}",
                    entry.shape,
                    self.path.display()
                ),
                expected: shape.len() as u64,
                actual: entry.shape.len() as u64,
            });
        }
        for (axis, (&got, &want)) in entry.shape.iter().zip(shape).enumerate() {
            if got != want {
                return Err(Error::SizeMismatch {
                    what: format!(
                        "axis {axis} of weight '{name}' {:?} in {}",
                        entry.shape,
                        self.path.display()
                    ),
                    expected: want as u64,
                    actual: got as u64,
                });
            }
        }
        Ok(entry)
    }

    /// The little-endian f32 bytes of tensor `name`, after checking that its shape is `shape`.
    ///
    /// # Errors
    /// As `WeightFile::entry`; [`Error::Malformed`] when the tensor is stored as f16 or int8.
    pub fn f32_bytes(&self, name: &str, shape: &[usize]) -> Result<&[u8]> {
        let entry = self.entry(name, shape)?;
        if entry.dtype != Dtype::F32 {
            return Err(Error::Malformed {
                source_name: self.path.display().to_string(),
                line: 0,
                message: format!("weight '{name}' is stored as {:?}, not F32", entry.dtype),
            });
        }
        Ok(&self.storage.bytes()[entry.start..entry.end])
    }

    /// Tensor `name` as f32 values (dequantised when stored as f16 or int8), after the checks of
    /// `WeightFile::entry`.
    ///
    /// # Errors
    /// As `WeightFile::entry`.
    pub fn f32_values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let entry = self.entry(name, shape)?;
        let format = self.stored_format(name, shape)?;
        let bytes = &self.storage.bytes()[entry.start..entry.end];
        if entry.dtype == Dtype::BF16 {
            return Ok(checks::bf16_values(bytes));
        }
        let scales: Vec<f32> = match self.scales.get(name) {
            Some(s) => bytemuck::pod_collect_to_vec(&self.storage.bytes()[s.start..s.end]),
            None => Vec::new(),
        };
        let (channels, inner) = channels_inner(shape);
        quant::dequantize(bytes, &scales, channels, inner, format)
            .map_err(|e| self.context(name, e))
    }

    /// `e`, raised while decoding or converting tensor `name`, as an error naming this file and
    /// the tensor: [`Error::Malformed`] for a conversion's complaint about the values, the same
    /// variant with the file added for a size mismatch.
    fn context(&self, name: &str, e: Error) -> Error {
        let file = self.path.display().to_string();
        match e {
            Error::SizeMismatch {
                what,
                expected,
                actual,
            } if !what.contains(&file) => Error::SizeMismatch {
                what: format!("{what} in {file}"),
                expected,
                actual,
            },
            Error::NonFiniteWeight { element, value, .. } => Error::Malformed {
                source_name: file,
                line: 0,
                message: format!(
                    "tensor '{name}': element {element} is {value} (weights must be finite)"
                ),
            },
            Error::Argument(a) => Error::Malformed {
                source_name: file,
                line: 0,
                message: format!("tensor '{name}': {a}"),
            },
            Error::Malformed { message: m, .. } => Error::Malformed {
                source_name: file,
                line: 0,
                message: format!("tensor '{name}': {m}"),
            },
            e => e,
        }
    }
}

/// `(channels, inner)` of a weight of `shape`: axis 0 (the output channel in PyTorch's layout of
/// Linear and Conv weights, the row of an embedding table) and the product of the other axes.
pub fn channels_inner(shape: &[usize]) -> (u64, u64) {
    match shape.split_first() {
        Some((&c, rest)) => (c as u64, rest.iter().product::<usize>() as u64),
        None => (1, 1),
    }
}

/// Refuses a directory where a weights file is expected: mapping one fails with the puzzling
/// "No such device" and reading one with "Is a directory" only on some systems.
///
/// # Errors
/// [`Error::Io`] (kind `IsADirectory`) naming the directory.
fn refuse_directory(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not a safetensors weights file (name the .safetensors file in it)",
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
