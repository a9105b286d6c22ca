//! Helpers the backends' own tests share: allocate and address blocks through any [`Backend`],
//! move f32 values to and from bytes, compare f32 results. Test support, as the rest of
//! `samples`: a failure panics (with the backend's error), which fails the calling test.

use crate::backend::{Backend, BlockDesc, BlockId, BlockRange, MemoryKind};

/// A block of `size` bytes of `kind` on `b`, labelled `"test"`.
///
/// # Panics
/// When the backend refuses the block.
#[allow(
    clippy::panic,
    reason = "test support: a refused block fails the calling test"
)]
pub fn alloc(b: &dyn Backend, kind: MemoryKind, size: u64) -> BlockId {
    b.alloc_block(&BlockDesc::new(kind, size, "test"))
        .unwrap_or_else(|e| panic!("a {kind:?} test block of {size} bytes: {e}"))
}

/// The `size` bytes of `block` from byte `offset`.
pub fn range(block: BlockId, offset: u64, size: u64) -> BlockRange {
    BlockRange {
        block,
        offset,
        size,
    }
}

/// The little-endian bytes of `v`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `v` read as little-endian f32 values (a trailing partial value is dropped).
pub fn bytes_f32(v: &[u8]) -> Vec<f32> {
    v.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Asserts that `got` and `want` have the same length and each `got[i]` is within
/// `tol · (1 + |want[i]|)` of `want[i]`.
///
/// # Panics
/// At the first element outside the bound, naming it.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}
