//! Tensors that grow in place: [`Runtime::alloc_expandable`] and [`Runtime::expand`], over the
//! device pool's [`Expandable`](crate::pool::Expandable) capability.
//!
//! An expandable tensor is one allocation at the start of a reservation of its own, so growing
//! it along its outermost axis keeps every byte where it was: bindings, offsets into it and its
//! contents stay valid, nothing is copied, and memory is committed only as the tensor grows. A
//! runtime whose pool stack cannot offer it (a backend without growable blocks, guard margins
//! or zero-on-reuse in the stack) returns `None`, and the caller allocates ordinary tensors.

use crate::ops::DType;
use crate::pool::ExpandableDesc;
use crate::runtime::segments::Segments;
use crate::runtime::{Runtime, Tensor, tensor};
use crate::{Error, Result};

impl Runtime {
    /// Allocates an uninitialised tensor of `shape` that can grow in place, to at most
    /// `reserve_bytes`, with [`Runtime::expand`]. `Ok(None)` where the device pool cannot (see
    /// the module doc) or no reservation can be made now.
    ///
    /// # Errors
    /// As [`Runtime::alloc`]; [`Error::TooLarge`] for a tensor above `reserve_bytes`.
    pub fn alloc_expandable(
        &self,
        dtype: DType,
        shape: &[usize],
        reserve_bytes: u64,
        label: &str,
    ) -> Result<Option<Tensor>> {
        self.front().check_alive()?;
        let size = tensor::byte_size(dtype, shape)?;
        Error::check_limit("expandable tensor", size, reserve_bytes, "its reservation")?;
        let pool = self.device_pool();
        let Some(expandable) = pool.expandable() else {
            return Ok(None);
        };
        let words = size.next_multiple_of(4);
        let Some(a) =
            expandable.allocate_expandable(&ExpandableDesc::new(words, reserve_bytes, label))?
        else {
            return Ok(None);
        };
        // The runtime keeps handles, not the range `allocate` leased: every use resolves.
        if let Err(e) = pool.release(a.handle) {
            let _ = pool.free(a.handle);
            return Err(e);
        }
        Ok(Some(Tensor::new(
            Segments::one(a, size),
            self.device_id(),
            dtype,
            shape.to_vec(),
            size,
        )))
    }

    /// Grows a tensor made by [`Runtime::alloc_expandable`] to `shape` in place: the same
    /// dimensions but the outermost, which may only grow. Bytes already in it stay where they
    /// are; the new ones are uninitialised.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid) for a shape that changes an inner
    /// dimension or shrinks;
    /// [`Error::Unsupported`] for a tensor that was not allocated expandable;
    /// [`Error::WrongDevice`]; as
    /// [`Expandable::expand`](crate::pool::Expandable::expand) (`TooLarge` past the
    /// reservation, `OutOfMemory`). The tensor is unchanged on error.
    pub fn expand(&self, t: &mut Tensor, shape: &[usize]) -> Result<()> {
        self.check_device(t, || "expand".to_string())?;
        let inner_same = shape.len() == t.shape().len()
            && shape.get(1..) == t.shape().get(1..)
            && shape.first() >= t.shape().first();
        if !inner_same {
            return Err(crate::ArgumentError::invalid_value(
                "expand shape",
                format!("{shape:?}"),
                format!("{:?} grown along its outermost axis only", t.shape()),
            )
            .into());
        }
        let size = tensor::byte_size(t.dtype(), shape)?;
        let pool = self.device_pool();
        let (Some(expandable), [a]) = (pool.expandable(), t.segments()) else {
            return Err(Error::Unsupported {
                backend: self.backend().capabilities().backend,
                what: "expanding a tensor that was not allocated expandable".into(),
            });
        };
        let a = expandable.expand(a.handle, size.next_multiple_of(4))?;
        t.regrow(Segments::one(a, size), shape.to_vec(), size);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
