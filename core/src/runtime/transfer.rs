//! Typed and byte transfers between the host and a runtime's device allocations, on the one write
//! path and the one read path that pick mapped, queued or staged copies (the module doc of
//! [`runtime`](super) lists the order). Separate from the runtime's construction and tensor
//! bookkeeping because it is where every byte crosses the bus.

use std::borrow::Cow;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{BlockRange, Ticket, Waiting};
use crate::pool::{Allocation, DevicePool, Lease};
use crate::trace::EventKind;
use crate::{Error, Result};

use super::tensor::check_element;
use super::{Element, Runtime, Tensor};

impl Runtime {
    /// The latest ticket of work that uses `alloc`, whose range the caller holds leased as
    /// `range`: recorded on the allocation, or seen by the front on any range overlapping it.
    pub(crate) fn last_use(
        &self,
        pool: &dyn DevicePool,
        alloc: Allocation,
        range: BlockRange,
    ) -> Result<Ticket> {
        let recorded = pool.last_use(alloc.handle)?;
        Ok(recorded.max(self.inner.front.last_use(&range)?))
    }

    /// Uploads `data` (exactly the tensor's byte size) into `tensor`. `T` is the tensor's dtype,
    /// or `u8` for raw bytes ([`Element`]). Native only; see [`Runtime::upload_async`].
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`], [`Error::SizeMismatch`], [`Error::StaleHandle`] for a freed
    /// tensor, [`Error::WrongDevice`], backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload<T: Element>(&self, tensor: &Tensor, data: &[T]) -> Result<Ticket> {
        complete_now(self.upload_with(Waiting::Blocking, tensor, data))
    }

    pub(super) async fn upload_with<T: Element>(
        &self,
        waiting: Waiting,
        tensor: &Tensor,
        data: &[T],
    ) -> Result<Ticket> {
        let what = || format!("upload into tensor of shape {:?}", tensor.shape());
        self.check_device(tensor, what)?;
        check_element::<T>(tensor.dtype(), what)?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != tensor.size() {
            return Err(Error::SizeMismatch {
                what: format!("upload into tensor of shape {:?}", tensor.shape()),
                expected: tensor.size(),
                actual: bytes.len() as u64,
            });
        }
        self.write_segments(waiting, tensor.placement(), tensor.size(), 0, bytes)
            .await
    }

    /// Downloads the whole tensor as elements of `T`: the tensor's dtype, or `u8` for raw bytes
    /// ([`Element`]). Native only; see [`Runtime::download_async`].
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`], [`Error::StaleHandle`], [`Error::WrongDevice`], backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download<T: Element>(&self, tensor: &Tensor) -> Result<Vec<T>> {
        complete_now(self.download_with(Waiting::Blocking, tensor))
    }

    pub(super) async fn download_with<T: Element>(
        &self,
        waiting: Waiting,
        tensor: &Tensor,
    ) -> Result<Vec<T>> {
        let what = || format!("download of tensor of shape {:?}", tensor.shape());
        self.check_device(tensor, what)?;
        check_element::<T>(tensor.dtype(), what)?;
        let elem = std::mem::size_of::<T>() as u64;
        let mut out = vec![T::zeroed(); (tensor.size() / elem) as usize];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        self.read_segments(waiting, tensor.placement(), tensor.size(), 0, bytes)
            .await?;
        Ok(out)
    }

    pub(crate) fn host_visible(&self) -> bool {
        self.inner.backend.capabilities().device_host_visible && !self.inner.config.force_staging
    }

    /// Writes `data` at `offset` bytes into a device allocation, choosing the transfer path (module
    /// doc). The offset must be a multiple of the copy alignment. Returns the ticket after which the
    /// bytes are in place for device work (already in place for host access when the path was
    /// mapped). Native only; see [`Runtime::write_bytes_async`].
    ///
    /// A length that is not a multiple of the copy alignment ends inside a word the backend can
    /// only write whole: the bytes after `data` in that word are read first and written back
    /// unchanged, so a partial write never touches its neighbours (the conformance case
    /// `partial_unaligned_writes_leave_their_neighbours`). That costs
    /// one small read (a wait for earlier work on the allocation) per unaligned write.
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`], [`Error::Misaligned`] offset,
    /// [`Error::StaleHandle`], backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn write_bytes(&self, alloc: Allocation, offset: u64, data: &[u8]) -> Result<Ticket> {
        complete_now(self.write_bytes_with(Waiting::Blocking, alloc, offset, data))
    }

    /// The one write path (module doc), waiting in `waiting`'s mode.
    pub(crate) async fn write_bytes_with(
        &self,
        waiting: Waiting,
        alloc: Allocation,
        offset: u64,
        data: &[u8],
    ) -> Result<Ticket> {
        let pool = self.device_pool();
        // Held until the use is recorded below; `with_tail`'s read holds a lease of its own.
        let (dst, _lease) =
            self.sub_range(pool.as_ref(), alloc, offset, data.len() as u64, "write")?;
        let padded = self
            .with_tail(waiting, pool.as_ref(), alloc, offset, data)
            .await?;
        let ticket = match self
            .write_range(waiting, pool.as_ref(), alloc, dst, &padded)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                // Chunks that were queued before the failure still write: later frees wait.
                if let Ok(t) = self.inner.backend.flush() {
                    let _ = pool.mark_used(alloc.handle, t);
                }
                return Err(e);
            }
        };
        pool.mark_used(alloc.handle, ticket)?;
        if let Some(t) = self.tracer() {
            t.record(EventKind::Upload {
                id: self.trace_id(alloc.handle),
                size: data.len() as u64,
            });
        }
        Ok(ticket)
    }

    /// `data` extended to whole copy words with the bytes that follow it in the allocation.
    async fn with_tail<'a>(
        &self,
        waiting: Waiting,
        pool: &dyn DevicePool,
        alloc: Allocation,
        offset: u64,
        data: &'a [u8],
    ) -> Result<Cow<'a, [u8]>> {
        let align = self.inner.backend.capabilities().copy_align.max(1) as usize;
        let whole = data.len() / align * align;
        if whole == data.len() {
            return Ok(Cow::Borrowed(data));
        }
        let mut word = vec![0u8; align];
        // Boxed: `read_into` is itself async, and a future may not contain itself.
        Box::pin(self.read_into(waiting, pool, alloc, offset + whole as u64, &mut word)).await?;
        let mut v = Vec::with_capacity(whole + align);
        v.extend_from_slice(data);
        v.extend_from_slice(&word[data.len() - whole..]);
        Ok(Cow::Owned(v))
    }

    /// Writes whole words `data` into `dst`: mapped, queued or staged (module doc).
    async fn write_range(
        &self,
        waiting: Waiting,
        pool: &dyn DevicePool,
        alloc: Allocation,
        dst: BlockRange,
        data: &[u8],
    ) -> Result<Ticket> {
        let backend = self.inner.backend.as_ref();
        if self.host_visible() {
            waiting
                .ticket(backend, self.last_use(pool, alloc, dst)?)
                .await?;
            waiting
                .write_mapped(backend, dst.block, dst.offset, data)
                .await?;
            Ok(Ticket::DONE)
        } else if !self.inner.config.force_staging
            && (data.len() as u64) <= backend.capabilities().queued_write_max
        {
            match backend.write_queued(dst, data)? {
                Some(t) => Ok(t),
                None => self.inner.staging.upload_with(waiting, dst, data).await,
            }
        } else {
            self.inner.staging.upload_with(waiting, dst, data).await
        }
    }

    /// Reads `out.len()` bytes at `offset` of a device allocation, after all work enqueued on it.
    /// Native only; see [`Runtime::read_bytes_async`].
    ///
    /// # Errors
    /// As [`Runtime::write_bytes`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_bytes(&self, alloc: Allocation, offset: u64, out: &mut [u8]) -> Result<()> {
        complete_now(self.read_bytes_with(Waiting::Blocking, alloc, offset, out))
    }

    /// The one read path, waiting in `waiting`'s mode.
    pub(crate) async fn read_bytes_with(
        &self,
        waiting: Waiting,
        alloc: Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let pool = self.device_pool();
        self.read_into(waiting, pool.as_ref(), alloc, offset, out)
            .await?;
        if let Some(t) = self.tracer() {
            t.record(EventKind::Download {
                id: self.trace_id(alloc.handle),
                size: out.len() as u64,
            });
        }
        Ok(())
    }

    async fn read_into(
        &self,
        waiting: Waiting,
        pool: &dyn DevicePool,
        alloc: Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let (src, _lease) = self.sub_range(pool, alloc, offset, out.len() as u64, "read")?;
        let backend = self.inner.backend.as_ref();
        let padded = src.size != out.len() as u64;
        let mut buf = vec![0u8; if padded { src.size as usize } else { 0 }];
        let target: &mut [u8] = if padded { &mut buf } else { &mut *out };
        if self.host_visible() {
            waiting
                .ticket(backend, self.last_use(pool, alloc, src)?)
                .await?;
            waiting
                .read_mapped(backend, src.block, src.offset, target)
                .await?;
        } else {
            self.inner
                .staging
                .download_with(waiting, src, target)
                .await?;
        }
        if padded {
            let n = out.len();
            out.copy_from_slice(&buf[..n]);
        }
        // A synchronous read has completed: the lease ends here.
        Ok(())
    }

    /// The checked range `[offset, offset + size)` of an allocation, with `size` rounded up to the
    /// copy alignment, and the lease that keeps it there (drop it after recording the use).
    pub(crate) fn sub_range<'p>(
        &self,
        pool: &'p dyn DevicePool,
        alloc: Allocation,
        offset: u64,
        size: u64,
        what: &'static str,
    ) -> Result<(BlockRange, Lease<'p>)> {
        if size == 0 {
            return Err(Error::ZeroSize { what });
        }
        let (range, lease) = Lease::resolve(pool, alloc.handle)?;
        let align = self.inner.backend.capabilities().copy_align.max(1);
        if !offset.is_multiple_of(align) {
            return Err(Error::Misaligned {
                what: "transfer offset",
                value: offset,
                align,
                align_name: "copy_align",
            });
        }
        let padded = size.div_ceil(align) * align;
        if offset
            .checked_add(padded)
            .is_none_or(|end| end > range.size)
        {
            return Err(Error::OutOfBounds {
                what: "allocation",
                offset,
                size,
                limit: range.size,
            });
        }
        let sub = BlockRange {
            block: range.block,
            offset: range.offset + offset,
            size: padded,
        };
        Ok((sub, lease))
    }
}
