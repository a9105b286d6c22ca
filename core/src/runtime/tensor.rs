//! `Tensor`: a typed, shaped view of one device allocation.

use crate::ops::DType;
use crate::pool::Allocation;
use crate::{Error, Result};

/// A device tensor: shape, element type and the allocation holding its bytes.
///
/// Not `Clone`: [`Runtime::free`](crate::Runtime::free) consumes it. The allocation handle inside is
/// checked on every use, so a tensor whose memory was freed through the pool reports
/// [`Error::StaleHandle`] instead of reading someone else's bytes.
#[derive(Debug)]
pub struct Tensor {
    alloc: Allocation,
    dtype: DType,
    shape: Vec<usize>,
    size: u64,
}

impl Tensor {
    pub(crate) fn new(alloc: Allocation, dtype: DType, shape: Vec<usize>, size: u64) -> Self {
        Tensor {
            alloc,
            dtype,
            shape,
            size,
        }
    }

    /// The allocation (handle and range).
    pub fn allocation(&self) -> Allocation {
        self.alloc
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape, outermost axis first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (never true for an allocated tensor).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes (before rounding to the copy alignment).
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Bytes of a tensor of `dtype` and `shape`.
///
/// # Errors
/// [`Error::ZeroSize`] for an empty tensor, [`Error::TooLarge`] on overflow.
pub(crate) fn byte_size(dtype: DType, shape: &[usize]) -> Result<u64> {
    let mut n: u64 = dtype.size();
    for &d in shape {
        n = n.checked_mul(d as u64).ok_or(Error::TooLarge {
            what: "tensor",
            requested: u64::MAX,
            limit: u64::MAX,
            limit_name: "u64 byte count",
        })?;
    }
    if n == 0 {
        return Err(Error::ZeroSize { what: "tensor" });
    }
    Ok(n)
}
