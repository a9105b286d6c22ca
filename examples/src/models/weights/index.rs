//! Opening a weights file: the tensor table built from the header, every tensor checked and
//! hashed, the declared checksum verified, and int8 tensors paired with their scales.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tensormem::runtime::WeightHasher;
use tensormem::{Error, Result, WeightFormat};

use super::storage::Storage;
use super::{
    Entry, META_FORMAT, META_GROUP, SCALE_SUFFIX, STREAM_CHUNK, WeightFile, channels_inner,
};
use crate::models::checks::{first_non_finite, float_size};
use crate::models::checksum::{self, file_checksum};

impl WeightFile {
    /// Parses the header, checks and hashes every tensor in [`STREAM_CHUNK`] pieces (releasing
    /// each piece's pages when mapped), verifies a tensormem file's [`checksum`] from the same
    /// pieces, and pairs int8 tensors with their scales.
    pub(super) fn index(path: &Path, storage: Storage) -> Result<Self> {
        let malformed = |message: String| Error::Malformed {
            source_name: path.display().to_string(),
            line: 0,
            message,
        };
        let bytes = storage.bytes();
        let base = bytes.as_ptr() as usize;
        let mut entries = HashMap::new();
        let group;
        let declared;
        let mut sums = Vec::new();
        {
            let (_, meta) = SafeTensors::read_metadata(bytes)
                .map_err(|e| malformed(format!("not a safetensors file: {e}")))?;
            let meta = meta.metadata().clone().unwrap_or_default();
            declared = checksum::declared(&meta, META_FORMAT).map_err(malformed)?;
            group = match meta.get(META_GROUP) {
                None => 0,
                Some(g) => g.parse().map_err(|_| {
                    malformed(format!("metadata {META_GROUP} = {g:?} is not a group size"))
                })?,
            };
            let st = SafeTensors::deserialize(bytes)
                .map_err(|e| malformed(format!("not a safetensors file: {e}")))?;
            for (name, view) in st.tensors() {
                let dtype = view.dtype();
                if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::I8) {
                    continue;
                }
                let data = view.data();
                // The view borrows `bytes`; its position is an offset into that buffer.
                let start = data.as_ptr() as usize - base;
                let mut hasher = WeightHasher::new();
                let mut crc = crc32fast::Hasher::new();
                for (k, chunk) in data.chunks(STREAM_CHUNK).enumerate() {
                    if let Some((i, v)) = first_non_finite(dtype, chunk) {
                        let elem = (k * STREAM_CHUNK) / float_size(dtype) + i;
                        return Err(malformed(format!(
                            "tensor '{name}' {:?} holds {v} at element {elem}",
                            view.shape()
                        )));
                    }
                    hasher.update(chunk);
                    if declared.is_some() {
                        crc.update(chunk);
                    }
                    let at = start + k * STREAM_CHUNK;
                    storage.release(at, at + chunk.len());
                }
                debug_assert!(start + data.len() <= bytes.len());
                sums.push((name.clone(), dtype, view.shape().to_vec(), crc.finalize()));
                entries.insert(
                    name,
                    Entry {
                        dtype,
                        shape: view.shape().to_vec(),
                        start,
                        end: start + data.len(),
                        hash: hasher.finish(),
                    },
                );
            }
        }
        if let Some(want) = declared {
            let got = file_checksum(sums.iter().map(|(n, d, s, c)| (n.as_str(), *d, &s[..], *c)));
            if got != want {
                return Err(malformed(format!(
                    "checksum mismatch: the tensors sum to {got:08x}, the file declares                      {want:08x}; the file is damaged: copy or re-quantize it again"
                )));
            }
        }
        // Pair every I8 tensor with its scales `[shape[0], groups]`.
        let mut scales = HashMap::new();
        let int8: Vec<String> = entries
            .iter()
            .filter(|(_, e)| e.dtype == Dtype::I8)
            .map(|(n, _)| n.clone())
            .collect();
        for name in int8 {
            let shape = entries[&name].shape.clone();
            let scale_name = format!("{name}{SCALE_SUFFIX}");
            let scale = entries
                .remove(&scale_name)
                .filter(|e| e.dtype == Dtype::F32)
                .ok_or_else(|| {
                    malformed(format!("int8 tensor '{name}' has no f32 '{scale_name}'"))
                })?;
            let (channels, inner) = channels_inner(&shape);
            let (_, groups) = WeightFormat::Int8 { group }.groups(inner.max(1));
            if channels == 0 || scale.shape.iter().product::<usize>() as u64 != channels * groups {
                return Err(malformed(format!(
                    "'{scale_name}' {:?} does not hold {channels} x {groups} scales for '{name}' \
                     {shape:?} (group {group})",
                    scale.shape
                )));
            }
            scales.insert(name, scale);
        }
        Ok(WeightFile {
            path: path.to_path_buf(),
            storage,
            entries,
            scales,
            group,
        })
    }
}
