//! The runtime: the pools of one backend device, tensors, typed transfers, and compiled graphs.
//!
//! A [`Runtime`] owns a device arena pool and a staging belt over one [`Backend`]. It is a cheap
//! handle (`Clone` shares it) and `Send + Sync`.
//!
//! Transfers pick the cheapest correct path once per call:
//! 1. device memory is host-visible (integrated GPUs, lavapipe, the host backend): wait for the
//!    tensor's last use, then map and copy — zero copy;
//! 2. the backend has a queue-ordered write path and the upload is small
//!    ([`Capabilities::queued_write_max`](crate::Capabilities::queued_write_max)): use it;
//! 3. otherwise stage through the belt.
//!
//! Every transfer and wait has a blocking form (native only) and an `_async` form (every target;
//! the only one in a browser), written once over [`Waiting`] (see [`crate::backend::completion`]);
//! the async forms are in `async_io`.

use std::sync::Arc;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Backend, BlockRange, HostAccess, Ticket, Waiting};
use crate::ops::DType;
use crate::pool::{Allocation, ArenaPool, PoolConfig, StagingBelt, StagingConfig};
use crate::trace::{EventKind, Tracer};
use crate::validate::Validated;
use crate::{Error, Result};

mod async_io;
mod dispatch;
mod model;
mod tensor;

pub use model::{MemoryReport, Model};
use tensor::check_element;
pub use tensor::{Element, Tensor};

/// Configuration of a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The device arena pool.
    pub device: PoolConfig,
    /// The staging belt.
    pub staging: StagingConfig,
    /// Stage every transfer through the belt, even when device memory is host-visible or the
    /// backend has its own queued write path (tests the discrete-GPU path on unified-memory
    /// devices). Default `false`.
    pub force_staging: bool,
    /// Time the static planner may spend per compiled graph (default 200 ms).
    pub plan_time_limit: std::time::Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            device: PoolConfig::device(),
            staging: StagingConfig::default(),
            force_staging: false,
            plan_time_limit: std::time::Duration::from_millis(200),
        }
    }
}

struct Inner {
    /// The validating front over the caller's backend; every pool and transfer goes through it.
    front: Arc<Validated>,
    /// The same front, as the trait object the pools hold.
    backend: Arc<dyn Backend>,
    device: ArenaPool,
    staging: StagingBelt,
    config: RuntimeConfig,
}

/// The pools of one backend device. See the module doc.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// Creates a runtime over `backend`, behind a fresh [`Validated`] front.
    ///
    /// # Errors
    /// Invalid pool or belt configuration.
    pub fn new(backend: Arc<dyn Backend>, config: RuntimeConfig) -> Result<Self> {
        let front = Arc::new(Validated::new(backend));
        let backend: Arc<dyn Backend> = front.clone();
        let device = ArenaPool::new(backend.clone(), config.device.clone())?;
        let staging = StagingBelt::new(backend.clone(), config.staging.clone())?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                front,
                backend,
                device,
                staging,
                config,
            }),
        })
    }

    /// The backend, behind the runtime's validating front: work dispatched through it on raw
    /// ranges is checked and its uses tracked like [`Runtime::dispatch`]'s.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The validating front (device state, in-flight uses).
    pub fn front(&self) -> &Validated {
        &self.inner.front
    }

    /// The device arena pool.
    pub fn device_pool(&self) -> &ArenaPool {
        &self.inner.device
    }

    /// The staging belt.
    pub fn staging(&self) -> &StagingBelt {
        &self.inner.staging
    }

    /// Starts (`Some`) or stops (`None`) tracing: the device pool's allocations, frees and blocks,
    /// this runtime's uploads and downloads, and every op's tensor uses in [`Model::enqueue`].
    pub fn set_tracer(&self, tracer: Option<Tracer>) {
        self.inner.staging.set_tracer(tracer.clone());
        self.inner.device.set_tracer(tracer);
    }

    /// The tracer, if tracing is on (one atomic load when it is off).
    pub fn tracer(&self) -> Option<Tracer> {
        self.inner.device.tracer()
    }

    /// Strict leak check for tests: fails while device tensors are still allocated (models hold
    /// theirs until dropped). Without it, dropping the last runtime handle prints the leak report.
    ///
    /// # Errors
    /// [`Error::Leak`] listing each live allocation (with where it was made when the tracer records
    /// backtraces).
    pub fn check_leaks(&self) -> Result<()> {
        self.inner.device.check_leaks()
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Allocates an uninitialised tensor in the device pool.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for an empty shape product, [`Error::ArithmeticOverflow`] when the byte
    /// size overflows, [`Error::TooLarge`] beyond the device, [`Error::OutOfMemory`],
    /// [`Error::DeviceLost`].
    pub fn alloc(&self, dtype: DType, shape: &[usize], label: &str) -> Result<Tensor> {
        self.inner.front.check_alive()?;
        let size = tensor::byte_size(dtype, shape)?;
        let alloc = self.inner.device.allocate(size, 1, label)?;
        Ok(Tensor::new(alloc, dtype, shape.to_vec(), size))
    }

    /// Allocates a tensor and uploads `data` into it. Native only; see
    /// [`Runtime::tensor_from_async`].
    ///
    /// # Errors
    /// As [`Runtime::alloc`] and [`Runtime::upload`]; nothing stays allocated on error.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn tensor_from<T: Element>(
        &self,
        dtype: DType,
        shape: &[usize],
        data: &[T],
        label: &str,
    ) -> Result<Tensor> {
        let t = self.alloc(dtype, shape, label)?;
        match self.upload(&t, data) {
            Ok(_) => Ok(t),
            Err(e) => {
                let _ = self.free(t);
                Err(e)
            }
        }
    }

    /// Frees a tensor; the memory is reused once the work that used it completes, including
    /// work dispatched on its raw range through [`Runtime::backend`] (the front tracks it).
    ///
    /// # Errors
    /// [`Error::StaleHandle`] / [`Error::DoubleFree`] if the allocation was already freed through
    /// the pool.
    pub fn free(&self, tensor: Tensor) -> Result<()> {
        let handle = tensor.allocation().handle;
        let pool = &self.inner.device;
        // A stale handle falls through to the pool, which says whether it is a double free.
        if let Ok(range) = pool.resolve(handle) {
            let pending = self.inner.front.last_use(&range);
            if pending > Ticket::DONE {
                pool.mark_used(handle, pending)?;
            }
        }
        pool.free(handle)
    }

    /// The latest ticket of work that uses `alloc`: recorded on the allocation, or seen by the
    /// front on any range overlapping it.
    fn last_use(&self, alloc: Allocation) -> Result<Ticket> {
        let pool = &self.inner.device;
        let recorded = pool.last_use(alloc.handle)?;
        Ok(recorded.max(self.inner.front.last_use(&pool.resolve(alloc.handle)?)))
    }

    /// Uploads `data` (exactly the tensor's byte size) into `tensor`. `T` is the tensor's dtype,
    /// or `u8` for raw bytes ([`Element`]). Native only; see [`Runtime::upload_async`].
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`], [`Error::SizeMismatch`], [`Error::StaleHandle`] for a freed
    /// tensor, backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload<T: Element>(&self, tensor: &Tensor, data: &[T]) -> Result<Ticket> {
        complete_now(self.upload_with(Waiting::Blocking, tensor, data))
    }

    async fn upload_with<T: Element>(
        &self,
        waiting: Waiting,
        tensor: &Tensor,
        data: &[T],
    ) -> Result<Ticket> {
        check_element::<T>(tensor.dtype(), || {
            format!("upload into tensor of shape {:?}", tensor.shape())
        })?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != tensor.size() {
            return Err(Error::SizeMismatch {
                what: format!("upload into tensor of shape {:?}", tensor.shape()),
                expected: tensor.size(),
                actual: bytes.len() as u64,
            });
        }
        self.write_bytes_with(waiting, tensor.allocation(), 0, bytes)
            .await
    }

    /// Downloads the whole tensor as elements of `T`: the tensor's dtype, or `u8` for raw bytes
    /// ([`Element`]). Native only; see [`Runtime::download_async`].
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`], [`Error::StaleHandle`], backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download<T: Element>(&self, tensor: &Tensor) -> Result<Vec<T>> {
        complete_now(self.download_with(Waiting::Blocking, tensor))
    }

    async fn download_with<T: Element>(&self, waiting: Waiting, tensor: &Tensor) -> Result<Vec<T>> {
        check_element::<T>(tensor.dtype(), || {
            format!("download of tensor of shape {:?}", tensor.shape())
        })?;
        let elem = std::mem::size_of::<T>() as u64;
        let mut out = vec![T::zeroed(); (tensor.size() / elem) as usize];
        self.read_bytes_with(
            waiting,
            tensor.allocation(),
            0,
            bytemuck::cast_slice_mut(&mut out),
        )
        .await?;
        Ok(out)
    }

    fn host_visible(&self) -> bool {
        self.inner.backend.capabilities().device_host_visible && !self.inner.config.force_staging
    }

    /// Writes `data` at `offset` bytes into a device allocation, choosing the transfer path (module
    /// doc). The offset must be a multiple of the copy alignment. Returns the ticket after which the
    /// bytes are in place for device work (already in place for host access when the path was
    /// mapped).
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`], [`Error::Misaligned`] offset,
    /// [`Error::StaleHandle`], backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn write_bytes(&self, alloc: Allocation, offset: u64, data: &[u8]) -> Result<Ticket> {
        complete_now(self.write_bytes_with(Waiting::Blocking, alloc, offset, data))
    }

    /// The one write path (module doc), waiting in `waiting`'s mode.
    async fn write_bytes_with(
        &self,
        waiting: Waiting,
        alloc: Allocation,
        offset: u64,
        data: &[u8],
    ) -> Result<Ticket> {
        let dst = self.sub_range(alloc, offset, data.len() as u64, "write")?;
        let pool = &self.inner.device;
        let backend = self.inner.backend.as_ref();
        let padded = pad(data, backend.capabilities().copy_align);
        let ticket = if self.host_visible() {
            waiting.ticket(backend, self.last_use(alloc)?).await?;
            waiting
                .host_access(backend, dst.block, HostAccess::Write)
                .await?;
            backend.write_mapped(dst.block, dst.offset, &padded)?;
            Ticket::DONE
        } else if !self.inner.config.force_staging
            && (padded.len() as u64) <= backend.capabilities().queued_write_max
        {
            match backend.write_queued(dst, &padded)? {
                Some(t) => t,
                None => {
                    self.inner
                        .staging
                        .upload_with(waiting, dst, &padded)
                        .await?
                }
            }
        } else {
            self.inner
                .staging
                .upload_with(waiting, dst, &padded)
                .await?
        };
        pool.mark_used(alloc.handle, ticket)?;
        if let Some(t) = pool.tracer() {
            t.record(EventKind::Upload {
                id: pool.trace_id(alloc.handle)?,
                size: data.len() as u64,
            });
        }
        Ok(ticket)
    }

    /// Reads `out.len()` bytes at `offset` of a device allocation, after all work enqueued on it.
    ///
    /// # Errors
    /// As [`Runtime::write_bytes`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_bytes(&self, alloc: Allocation, offset: u64, out: &mut [u8]) -> Result<()> {
        complete_now(self.read_bytes_with(Waiting::Blocking, alloc, offset, out))
    }

    /// The one read path, waiting in `waiting`'s mode.
    async fn read_bytes_with(
        &self,
        waiting: Waiting,
        alloc: Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let src = self.sub_range(alloc, offset, out.len() as u64, "read")?;
        let backend = self.inner.backend.as_ref();
        let align = backend.capabilities().copy_align.max(1);
        let padded_len = (out.len() as u64).div_ceil(align) * align;
        let padded = padded_len != out.len() as u64;
        let mut buf = vec![0u8; if padded { padded_len as usize } else { 0 }];
        let target: &mut [u8] = if padded { &mut buf } else { &mut *out };
        if self.host_visible() {
            waiting.ticket(backend, self.last_use(alloc)?).await?;
            waiting
                .host_access(backend, src.block, HostAccess::Read)
                .await?;
            backend.read_mapped(src.block, src.offset, target)?;
        } else {
            self.inner
                .staging
                .download_with(
                    waiting,
                    BlockRange {
                        size: padded_len,
                        ..src
                    },
                    target,
                )
                .await?;
        }
        if padded {
            let n = out.len();
            out.copy_from_slice(&buf[..n]);
        }
        if let Some(t) = self.inner.device.tracer() {
            t.record(EventKind::Download {
                id: self.inner.device.trace_id(alloc.handle)?,
                size: out.len() as u64,
            });
        }
        Ok(())
    }

    /// The checked range `[offset, offset + size)` of an allocation, with `size` rounded up to the
    /// copy alignment.
    fn sub_range(
        &self,
        alloc: Allocation,
        offset: u64,
        size: u64,
        what: &'static str,
    ) -> Result<BlockRange> {
        if size == 0 {
            return Err(Error::ZeroSize { what });
        }
        let range = self.inner.device.resolve(alloc.handle)?;
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
        Ok(BlockRange {
            block: range.block,
            offset: range.offset + offset,
            size: padded,
        })
    }

    /// Waits until all work submitted so far has completed and reclaims deferred frees. Native
    /// only; see [`Runtime::synchronize_async`].
    ///
    /// # Errors
    /// Backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn synchronize(&self) -> Result<()> {
        complete_now(self.synchronize_with(Waiting::Blocking))
    }

    async fn synchronize_with(&self, waiting: Waiting) -> Result<()> {
        let t = self.inner.backend.flush()?;
        waiting.ticket(self.inner.backend.as_ref(), t).await?;
        self.inner.device.reclaim()
    }
}

/// `data` padded with zeros to a multiple of `align` (borrowed when already aligned).
fn pad(data: &[u8], align: u64) -> std::borrow::Cow<'_, [u8]> {
    let align = align.max(1) as usize;
    if data.len().is_multiple_of(align) {
        std::borrow::Cow::Borrowed(data)
    } else {
        let mut v = data.to_vec();
        v.resize(data.len().div_ceil(align) * align, 0);
        std::borrow::Cow::Owned(v)
    }
}

#[cfg(test)]
mod tests;
