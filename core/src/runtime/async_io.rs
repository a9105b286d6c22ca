//! The runtime's transfers and waits that never block: the forms a browser uses, available on
//! every target. Each shares its body with the blocking form of the same name without `_async`
//! (see [`Waiting`]), so both behave the same and the conformance suite runs both.

use super::Element;

use super::{Runtime, Tensor};
use crate::Result;
use crate::backend::{Ticket, TicketWait, Waiting};
use crate::ops::DType;
use crate::pool::Allocation;

impl Runtime {
    /// [`Runtime::tensor_from`](Runtime::alloc) without blocking: allocates a tensor and uploads
    /// `data` into it.
    ///
    /// # Errors
    /// As [`Runtime::alloc`] and [`Runtime::upload_async`]; nothing stays allocated on error.
    pub async fn tensor_from_async<T: Element>(
        &self,
        dtype: DType,
        shape: &[usize],
        data: &[T],
        label: &str,
    ) -> Result<Tensor> {
        let waiting = Waiting::Async;
        self.tensor_from_with(waiting, dtype, shape, data, label)
            .await
    }

    /// [`Runtime::tensor_from`] and [`Runtime::tensor_from_async`], waiting as `waiting` says.
    pub(super) async fn tensor_from_with<T: Element>(
        &self,
        waiting: Waiting,
        dtype: DType,
        shape: &[usize],
        data: &[T],
        label: &str,
    ) -> Result<Tensor> {
        let t = self.alloc(dtype, shape, label)?;
        match self.upload_with(waiting, &t, data).await {
            Ok(_) => Ok(t),
            Err(e) => {
                // Part of the upload may be queued: the bytes return after it.
                let after = self.backend().flush().unwrap_or(Ticket::DONE);
                self.discard_segments(t.placement(), after);
                Err(e)
            }
        }
    }

    /// Uploads `data` (exactly the tensor's byte size) into `tensor` without blocking.
    ///
    /// # Errors
    /// [`crate::Error::SizeMismatch`], [`crate::Error::StaleHandle`] for a freed tensor, backend
    /// errors.
    pub async fn upload_async<T: Element>(&self, tensor: &Tensor, data: &[T]) -> Result<Ticket> {
        self.upload_with(Waiting::Async, tensor, data).await
    }

    /// Downloads the whole tensor as elements of `T` without blocking.
    ///
    /// # Errors
    /// As [`Runtime::upload_async`].
    pub async fn download_async<T: Element>(&self, tensor: &Tensor) -> Result<Vec<T>> {
        self.download_with(Waiting::Async, tensor).await
    }

    /// Writes `data` at `offset` bytes into a device allocation without blocking (the transfer
    /// paths of the module doc).
    ///
    /// # Errors
    /// [`crate::Error::ZeroSize`], [`crate::Error::OutOfBounds`],
    /// [`crate::Error::Misaligned`] for a misaligned offset, [`crate::Error::StaleHandle`],
    /// backend errors.
    pub async fn write_bytes_async(
        &self,
        alloc: Allocation,
        offset: u64,
        data: &[u8],
    ) -> Result<Ticket> {
        self.write_bytes_with(Waiting::Async, alloc, offset, data)
            .await
    }

    /// Reads `out.len()` bytes at `offset` of a device allocation, after all work enqueued on it,
    /// without blocking.
    ///
    /// # Errors
    /// As [`Runtime::write_bytes_async`].
    pub async fn read_bytes_async(
        &self,
        alloc: Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        self.read_bytes_with(Waiting::Async, alloc, offset, out)
            .await
    }

    /// Resolves once `ticket` (and everything before it) has completed.
    ///
    /// # Errors
    /// [`crate::Error::DeviceLost`], [`crate::Error::UnknownTicket`] for a ticket never issued.
    pub async fn wait_async(&self, ticket: Ticket) -> Result<()> {
        TicketWait::new(self.backend().as_ref(), ticket).await
    }

    /// Waits without blocking until all work submitted so far has completed, then reclaims
    /// deferred frees.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn synchronize_async(&self) -> Result<()> {
        self.synchronize_with(Waiting::Async).await
    }
}
