//! The integrity of tensormem's own weight files (what `tensormem-quantize` writes, marked by the
//! `tensormem.format` metadata key): a format version and a checksum over every tensor, written
//! in the safetensors metadata and verified when the file is opened.
//!
//! **What the checksum covers.** Each tensor's name, dtype, shape and the CRC-32 of its bytes, in
//! name order, folded into one CRC-32. The reader computes each tensor's CRC-32 in the same pass
//! that already checks and hashes it in [`STREAM_CHUNK`](super::weights::STREAM_CHUNK) pieces, so
//! verifying reads no byte twice and a mapped file's pages are still released piece by piece.
//! A flipped byte in an int8 body, a scale or a header field the parser accepts all change it.
//!
//! **Versions.** Version 1 files (written before the checksum existed) carry no version key; they
//! are refused with a message to re-quantize them, since nothing can tell a damaged version 1
//! file from an intact one. Files without `tensormem.format` (f32 exports from other tools) have
//! no checksum and are read as before.

use std::collections::HashMap;

use safetensors::Dtype;

/// Metadata key of the format version of a tensormem weight file.
pub const META_VERSION: &str = "tensormem.version";
/// Metadata key of a tensormem weight file's checksum (8 lowercase hex digits).
pub const META_CHECKSUM: &str = "tensormem.checksum";
/// The format version this build writes and reads: 2, the first with a checksum.
pub const FORMAT_VERSION: u32 = 2;

/// The file checksum of `tensors` (name, dtype, shape, CRC-32 of the bytes), in any order.
pub fn file_checksum<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Dtype, &'a [usize], u32)>,
) -> u32 {
    let mut all: Vec<_> = tensors.into_iter().collect();
    all.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut h = crc32fast::Hasher::new();
    for (name, dtype, shape, crc) in all {
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(format!("{dtype:?}").as_bytes());
        h.update(&(shape.len() as u64).to_le_bytes());
        for &d in shape {
            h.update(&(d as u64).to_le_bytes());
        }
        h.update(&crc.to_le_bytes());
    }
    h.finalize()
}

/// The metadata entries that mark a file of format version [`FORMAT_VERSION`] with `checksum`.
pub fn metadata(checksum: u32) -> [(String, String); 2] {
    [
        (META_VERSION.to_string(), FORMAT_VERSION.to_string()),
        (META_CHECKSUM.to_string(), format!("{checksum:08x}")),
    ]
}

/// The checksum a tensormem weight file declares, or `None` for a file of another tool (no
/// `tensormem.format` key): nothing to verify.
///
/// # Errors
/// A message (the caller adds the file name) when the file is a tensormem file of version 1 or
/// of an unknown version, or its checksum is missing or not hex.
pub fn declared(meta: &HashMap<String, String>, format_key: &str) -> Result<Option<u32>, String> {
    if !meta.contains_key(format_key) {
        return Ok(None);
    }
    let requantize = "re-quantize the original f32 weights with this build's tensormem-quantize";
    match meta.get(META_VERSION) {
        None => {
            return Err(format!(
                "written by an older tensormem-quantize (format version 1, no checksum, so \
                 damage cannot be detected): {requantize}"
            ));
        }
        Some(v) if v.parse::<u32>().ok() != Some(FORMAT_VERSION) => {
            return Err(format!(
                "format version {v:?}, but this build reads version {FORMAT_VERSION}: {requantize}"
            ));
        }
        Some(_) => {}
    }
    let text = meta
        .get(META_CHECKSUM)
        .ok_or_else(|| format!("metadata {META_CHECKSUM} is missing: {requantize}"))?;
    u32::from_str_radix(text, 16)
        .map(Some)
        .map_err(|_| format!("metadata {META_CHECKSUM} = {text:?} is not a hex checksum"))
}
