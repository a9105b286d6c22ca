//! `Tensor`: a typed, shaped view of device memory (one allocation, or several segments when it
//! is larger than the device's largest block), and [`Element`], the Rust types a typed transfer
//! may use.

use bytemuck::Pod;

use crate::backend::DeviceId;
use crate::ops::DType;
use crate::pool::Allocation;
use crate::runtime::segments::Segments;
use crate::{Error, Result};

/// A device tensor: shape, element type, the device it lives on and the allocations holding its
/// bytes.
///
/// A tensor larger than the device's largest block (WebGPU's `max_buffer_size`, 256 MiB by
/// default) is held in several **segments**, each its own allocation in one block: segment `i`
/// holds bytes `[i * segment_size, (i + 1) * segment_size)` of the tensor, the last one the rest
/// (see [`Runtime::alloc`](crate::Runtime::alloc) for where the cuts fall). Transfers go segment
/// by segment and ops run as parts that each bind within one segment, so callers see one tensor.
///
/// Not `Clone`: [`Runtime::free`](crate::Runtime::free) consumes it. The allocation handles inside
/// are checked on every use, so a tensor whose memory was freed through the pool reports
/// [`Error::StaleHandle`] instead of reading someone else's bytes.
#[derive(Debug)]
pub struct Tensor {
    /// One allocation unless the tensor is larger than a block.
    segments: Segments,
    device: DeviceId,
    dtype: DType,
    shape: Vec<usize>,
    size: u64,
}

impl Tensor {
    pub(crate) fn new(
        segments: Segments,
        device: DeviceId,
        dtype: DType,
        shape: Vec<usize>,
        size: u64,
    ) -> Self {
        Tensor {
            segments,
            device,
            dtype,
            shape,
            size,
        }
    }

    /// The tensor after growing in place ([`Runtime::expand`](crate::Runtime::expand)).
    pub(crate) fn regrow(&mut self, segments: Segments, shape: Vec<usize>, size: u64) {
        (self.segments, self.shape, self.size) = (segments, shape, size);
    }

    /// The allocation (handle and range) holding the tensor's first byte: all of it unless the
    /// tensor has several [`segments`](Tensor::segments).
    pub fn allocation(&self) -> Allocation {
        self.segments.first()
    }

    /// The allocations holding the tensor, in byte order: one, or several when the tensor is
    /// larger than the device's largest block.
    pub fn segments(&self) -> &[Allocation] {
        self.segments.allocs()
    }

    /// Where the bytes are.
    pub(crate) fn placement(&self) -> &Segments {
        &self.segments
    }

    /// Each segment with the range of the tensor's bytes it holds: `(allocation, offset, size)`.
    pub(crate) fn pieces(&self) -> impl Iterator<Item = (Allocation, u64, u64)> + '_ {
        self.segments.pieces(self.size)
    }

    /// The device whose pool holds the bytes ([`RuntimeConfig::device_id`](crate::RuntimeConfig)
    /// of the runtime that allocated it): every op and transfer checks it, so a tensor is never
    /// used on another device's runtime.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape, outermost axis first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements (the shape's product was checked when the tensor was made; saturates
    /// where `usize` is narrower than the count).
    pub fn len(&self) -> usize {
        usize::try_from(self.size / self.dtype.size()).unwrap_or(usize::MAX)
    }

    /// Whether the tensor has no elements (never true for an allocated tensor).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Size in bytes (before rounding to the copy alignment).
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// A Rust type that holds one element of a [`DType`]: what typed transfers
/// ([`Runtime::upload`](crate::Runtime::upload), [`Runtime::download`](crate::Runtime::download),
/// [`Model::read_output`](crate::Model::read_output)) accept. `u8` doubles as "raw bytes" and is
/// accepted for a tensor of any dtype; every other type must match the tensor's dtype, so f64
/// data cannot land in an f32 tensor unnoticed.
pub trait Element: Pod {
    /// The dtype of one element.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}

element!(f32 => F32, f64 => F64, i32 => I32, u32 => U32, i64 => I64, u8 => U8, u16 => U16);

/// Checks that `T` may carry the elements of a `dtype` tensor (same dtype, or raw bytes).
///
/// # Errors
/// [`Error::DTypeMismatch`] naming the call `what()` describes.
pub(crate) fn check_element<T: Element>(dtype: DType, what: impl FnOnce() -> String) -> Result<()> {
    if T::DTYPE == dtype || T::DTYPE == DType::U8 {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            what: what(),
            expected: dtype,
            actual: T::DTYPE,
        })
    }
}

/// Bytes of a tensor of `dtype` and `shape`.
///
/// # Errors
/// [`Error::ZeroSize`] for an empty tensor, [`Error::ArithmeticOverflow`] when the byte count does
/// not fit in `u64`.
pub(crate) fn byte_size(dtype: DType, shape: &[usize]) -> Result<u64> {
    let mut n: u64 = dtype.size();
    for &d in shape {
        n = n
            .checked_mul(d as u64)
            .ok_or_else(|| Error::ArithmeticOverflow {
                what: format!("byte size of a {} tensor of shape {shape:?}", dtype.name()),
                limit_name: "u64",
            })?;
    }
    if n == 0 {
        return Err(Error::ZeroSize { what: "tensor" });
    }
    Ok(n)
}
