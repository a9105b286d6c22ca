//! The runtime: the pools of one backend device, tensors, typed transfers, and compiled graphs.
//!
//! A [`Runtime`] owns a device pool stack and a staging belt over one [`Backend`]. It is a cheap
//! handle (`Clone` shares it) and `Send + Sync`. The stack is built from [`RuntimeConfig::device`]
//! over an [`ArenaPool`](crate::ArenaPool), or over any [`DevicePool`] ([`Runtime::with_pool`]);
//! its pools and the belt share one [`Budget`] and its pressure path, so idle memory in one is
//! released before another reports out of memory.
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
//! the async forms are in `async_io`, the transfer paths themselves in `transfer`.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::backend::DeviceId;
#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Backend, MemoryKind, Ticket, Waiting};
use crate::ops::DType;
use crate::pool::{
    AllocationStats, Budget, DevicePool, Handle, PoolConfig, PoolStack, Reclaim, StagingBelt,
    StagingConfig, Traced,
};
use crate::trace::Tracer;
use crate::validate::{DeviceLimits, Validated};
use crate::{Error, Result};

mod async_io;
pub(crate) mod dispatch;
mod expandable;
mod managed;
pub(crate) mod model;
mod replay;
mod segments;
pub(crate) mod tensor;
mod transfer;
mod weights;

pub use model::{CompileDesc, MemoryReport, Model, OffloadReport, Rates, WEIGHT_CHUNK_BYTES};
pub use tensor::{Element, Tensor};
pub use weights::{WeightHasher, WeightKey, WeightStore, WeightStoreReport, content_hash};

/// Configuration of a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The device pool stack: the arena (unless [`Runtime::with_pool`] supplies the bottom pool)
    /// and its adaptors. `device.budget` (default: the backend's reported budget) limits the
    /// device memory the runtime's pools reserve together.
    pub device: PoolConfig,
    /// The staging belt.
    pub staging: StagingConfig,
    /// Stage every transfer through the belt, even when device memory is host-visible or the
    /// backend has its own queued write path (tests the discrete-GPU path on unified-memory
    /// devices). Default `false`.
    pub force_staging: bool,
    /// Time the static planner may spend per compiled graph (default 200 ms).
    pub plan_time_limit: std::time::Duration,
    /// The longest any one blocking device wait of this runtime (its pools, transfers and model
    /// runs) may take before it fails with [`Error::Timeout`]. `None`
    /// (the default) keeps the backend's own limit (60 s on Vulkan and wgpu, none on the host
    /// and CUDA); `Some(Duration::MAX)` waits forever. Native only: nothing blocks on `wasm32`.
    #[cfg(not(target_arch = "wasm32"))]
    pub wait_timeout: Option<std::time::Duration>,
    /// Device limits below the backend's, reported and enforced by the runtime's front
    /// ([`DeviceLimits`]). Default: none (the backend's). Tests lower `max_block_size` to a few
    /// KiB to run tensors split into segments, and `max_binding_size` to run ops split into
    /// parts, on every backend.
    pub limits: DeviceLimits,
    /// Which device of a [`DeviceSet`](crate::DeviceSet) this runtime is (the set assigns it;
    /// default [`DeviceId(0)`](DeviceId)). Every tensor carries it, and the runtime refuses
    /// tensors of another id with [`Error::WrongDevice`].
    pub device_id: DeviceId,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            device: PoolConfig::device(),
            staging: StagingConfig::default(),
            force_staging: false,
            plan_time_limit: std::time::Duration::from_millis(200),
            #[cfg(not(target_arch = "wasm32"))]
            wait_timeout: None,
            limits: DeviceLimits::default(),
            device_id: DeviceId(0),
        }
    }
}

struct Inner {
    /// The validating front over the caller's backend; every pool and transfer goes through it.
    front: Arc<Validated>,
    /// The same front, as the trait object the pools hold.
    backend: Arc<dyn Backend>,
    /// The configured stack (without tracing).
    stack: PoolStack,
    /// The tracing adaptor over `stack.top` while tracing is on.
    traced: RwLock<Option<Arc<TracedStack>>>,
    staging: Arc<StagingBelt>,
    budget: Arc<Budget>,
    /// Keeps the device stack's pressure member alive (the budget holds it weakly).
    _device_member: Arc<dyn Reclaim>,
    /// Weights shared by every model compiled on this runtime.
    weights: WeightStore,
    /// Allocations freed while their last use could not be known (a failed join of the transfer
    /// lane): freed by the next successful synchronize, once every lane's work has completed.
    unsettled: Mutex<Vec<Handle>>,
    config: RuntimeConfig,
    /// The offload planner's (link, device) rates, measured on first use ([`Rates::Measured`]).
    rates: Mutex<Option<(f64, f64)>>,
}

/// The tracing adaptor over a runtime's stack.
type TracedStack = Traced<Arc<dyn DevicePool>>;

/// A pool stack as a member of the budget's pressure path.
struct StackMember(Arc<dyn DevicePool>);

impl Reclaim for StackMember {
    fn release_idle(&self) -> Result<u64> {
        self.0.trim()
    }
}

/// The pools of one backend device. See the module doc.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// Creates a runtime over `backend`, behind a fresh [`Validated`] front, with a device arena
    /// pool built from `config.device`.
    ///
    /// # Errors
    /// Invalid pool or belt configuration, invalid [`RuntimeConfig::limits`].
    pub fn new(backend: Arc<dyn Backend>, config: RuntimeConfig) -> Result<Self> {
        let front = Self::new_front(backend, &config)?;
        let backend: Arc<dyn Backend> = front.clone();
        let budget = Self::new_budget(&backend, &config);
        let stack = config
            .device
            .build_with_budget(backend.clone(), budget.clone())?;
        Self::assemble(front, backend, config, stack, budget)
    }

    /// Creates a runtime whose device tensors come from the pool `make_pool` builds (a
    /// [`ReplayPool`](crate::pool::ReplayPool), a user's own pool, ...) over the backend and the
    /// budget it is given (the runtime's validating front, so the pool's blocks are known to it,
    /// and the device-memory account shared with the staging belt: build an
    /// [`ArenaPool::with_budget`](crate::ArenaPool::with_budget) on it), wrapped in the adaptors
    /// `config.device` asks for. The pool takes part in the pressure path (its `trim` is called
    /// before any pool of the runtime reports out of memory).
    ///
    /// # Errors
    /// `make_pool`'s errors; invalid adaptor or belt configuration.
    pub fn with_pool(
        backend: Arc<dyn Backend>,
        config: RuntimeConfig,
        make_pool: impl FnOnce(Arc<dyn Backend>, Arc<Budget>) -> Result<Arc<dyn DevicePool>>,
    ) -> Result<Self> {
        let front = Self::new_front(backend, &config)?;
        let backend: Arc<dyn Backend> = front.clone();
        let budget = Self::new_budget(&backend, &config);
        let pool = make_pool(backend.clone(), budget.clone())?;
        let stack = config.device.wrap(backend.clone(), pool)?;
        Self::assemble(front, backend, config, stack, budget)
    }

    fn new_front(backend: Arc<dyn Backend>, config: &RuntimeConfig) -> Result<Arc<Validated>> {
        let front = Validated::new(backend).with_limits(config.limits)?;
        #[cfg(not(target_arch = "wasm32"))]
        let front = front.with_wait_timeout(config.wait_timeout);
        Ok(Arc::new(front))
    }

    fn new_budget(backend: &Arc<dyn Backend>, config: &RuntimeConfig) -> Arc<Budget> {
        let limit = match config.device.kind {
            // Managed memory lives on the device while it is used there: the same budget.
            MemoryKind::DeviceLocal | MemoryKind::Managed => {
                config.device.budget.or(backend.capabilities().budget)
            }
            _ => config.device.budget,
        };
        Budget::new(limit)
    }

    fn assemble(
        front: Arc<Validated>,
        backend: Arc<dyn Backend>,
        config: RuntimeConfig,
        stack: PoolStack,
        budget: Arc<Budget>,
    ) -> Result<Self> {
        let staging = Arc::new(StagingBelt::new(backend.clone(), config.staging.clone())?);
        let device_member: Arc<dyn Reclaim> = Arc::new(StackMember(stack.top.clone()));
        budget.register(Arc::downgrade(&device_member));
        let belt: Arc<dyn Reclaim> = staging.clone();
        let id = budget.register(Arc::downgrade(&belt));
        staging.join(budget.clone(), id);
        Ok(Runtime {
            inner: Arc::new(Inner {
                front,
                backend,
                stack,
                traced: RwLock::new(None),
                staging,
                budget,
                _device_member: device_member,
                weights: WeightStore::default(),
                unsettled: Mutex::new(Vec::new()),
                config,
                rates: Mutex::new(None),
            }),
        })
    }

    /// The offload planner's measured (link, device) rates: `measure`'s, the first time, then the
    /// same numbers for the runtime's life ([`Rates::Measured`]).
    pub(crate) fn measured_rates(
        &self,
        measure: impl FnOnce() -> Result<(f64, f64)>,
    ) -> Result<(f64, f64)> {
        let mut rates = self.inner.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = *rates {
            return Ok(r);
        }
        let r = measure()?;
        *rates = Some(r);
        Ok(r)
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

    /// The device pool stack's top (with the tracing adaptor while tracing is on).
    pub fn device_pool(&self) -> Arc<dyn DevicePool> {
        match self.traced().as_ref() {
            Some(t) => t.clone(),
            None => self.inner.stack.top.clone(),
        }
    }

    fn traced(&self) -> Option<Arc<TracedStack>> {
        self.inner
            .traced
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The staging belt.
    pub fn staging(&self) -> &StagingBelt {
        &self.inner.staging
    }

    /// The device pool's allocation counters: bytes requested and handed out, peaks, refusals
    /// (`None` when [`PoolConfig::statistics`] is off). Block-level counters are the pool's own
    /// [`DevicePool::stats`].
    pub fn allocation_stats(&self) -> Option<AllocationStats> {
        self.inner
            .stack
            .stats
            .as_ref()
            .map(|s| s.allocation_stats())
    }

    /// The device-memory budget shared by the runtime's pools.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.inner.budget
    }

    /// Starts (`Some`) or stops (`None`) tracing: the device pool's allocations, frees and blocks
    /// (a [`Traced`] adaptor goes on top of the stack), this runtime's uploads and downloads, and
    /// every op's tensor uses in [`Model::enqueue`]. Allocations made while tracing was off are not
    /// traced later.
    pub fn set_tracer(&self, tracer: Option<Tracer>) {
        self.inner.staging.set_tracer(tracer.clone());
        let top = &self.inner.stack.top;
        let traced = tracer.map(|t| Arc::new(Traced::new(top.clone(), t)));
        if traced.is_none() {
            top.set_listener(None);
        }
        if let Some(l) = &self.inner.stack.leaks {
            l.set_trace_ids(traced.as_ref().map(|t| t.ids().clone()));
        }
        *self
            .inner
            .traced
            .write()
            .unwrap_or_else(PoisonError::into_inner) = traced;
    }

    /// The tracer, if tracing is on.
    pub fn tracer(&self) -> Option<Tracer> {
        self.traced().map(|t| t.ids().tracer().clone())
    }

    /// The allocation's id in the tracer (0 when tracing is off or it was made with tracing off).
    pub fn trace_id(&self, handle: Handle) -> u64 {
        self.traced().map_or(0, |t| t.ids().id(handle))
    }

    /// Strict leak check for tests: fails while device tensors are still allocated (models hold
    /// theirs until dropped). Without it, dropping the last runtime handle prints the leak report
    /// (unless [`PoolConfig::leak_report`] is off).
    ///
    /// # Errors
    /// [`Error::Leak`] listing each live allocation (with where it was made when the tracer records
    /// backtraces).
    pub fn check_leaks(&self) -> Result<()> {
        let traced = self.traced();
        crate::pool::check_leaks(
            self.inner.stack.top.as_ref(),
            traced.as_ref().map(|t| t.ids().as_ref()),
        )
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// The device this runtime is ([`RuntimeConfig::device_id`]).
    pub fn device_id(&self) -> DeviceId {
        self.inner.config.device_id
    }

    /// Refuses a tensor of another device with [`Error::WrongDevice`] naming the call.
    pub(crate) fn check_device(
        &self,
        tensor: &Tensor,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        if tensor.device() == self.device_id() {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                what: what(),
                tensor: tensor.device(),
                runtime: self.device_id(),
            })
        }
    }

    /// Allocates an uninitialised tensor in the device pool. Nothing is handed out after device
    /// loss: besides the front's state, the device is polled (`completed()`, never a wait), so a
    /// loss no call has seen yet is found here and not by the tensor's first use.
    ///
    /// A tensor larger than the device's largest block (`max_block_size`) is allocated as
    /// [segments](Tensor::segments), each in one block, cut between slices of its outermost axis
    /// (see `runtime/segments.rs`); all segments are allocated or none.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for an empty shape product, [`Error::ArithmeticOverflow`] when the byte
    /// size overflows, [`Error::TooLarge`] beyond the device, [`Error::OutOfMemory`],
    /// [`Error::DeviceLost`].
    pub fn alloc(&self, dtype: DType, shape: &[usize], label: &str) -> Result<Tensor> {
        self.inner.front.check_alive()?;
        let size = tensor::byte_size(dtype, shape)?;
        self.inner.backend.completed()?;
        let segments = self.alloc_segments(dtype, shape, size, 1, label)?;
        Ok(Tensor::new(
            segments,
            self.device_id(),
            dtype,
            shape.to_vec(),
            size,
        ))
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
        complete_now(self.tensor_from_with(Waiting::Blocking, dtype, shape, data, label))
    }

    /// Frees a tensor; the memory is reused once the work that used it completes, including
    /// work dispatched on its raw range through [`Runtime::backend`] (the front tracks it).
    ///
    /// # Errors
    /// [`Error::StaleHandle`] / [`Error::DoubleFree`] if the allocation was already freed through
    /// the pool; [`Error::WrongDevice`] for another device's tensor; the backend's error when the
    /// tensor's last use on the transfer lane cannot be joined: the memory is then freed by the
    /// next successful [`Runtime::synchronize`], when no work can use it any more.
    pub fn free(&self, tensor: Tensor) -> Result<()> {
        self.check_device(&tensor, || "free".into())?;
        let pool = self.device_pool();
        let mut result = Ok(());
        for a in tensor.segments() {
            // A stale handle falls through to the pool, which says whether it is a double free;
            // bytes spilled to host memory are not brought back to be freed.
            if let Ok(Some(range)) = pool.resident(a.handle) {
                match self.inner.front.last_use(&range) {
                    Ok(pending) if pending > Ticket::DONE => {
                        result = result.and(pool.mark_used(a.handle, pending));
                    }
                    Ok(_) => {}
                    // Whether work still uses it is unknown: it is freed once all work has
                    // completed (the next synchronize), never before.
                    Err(e) => {
                        result = result.and(Err(e));
                        self.inner
                            .unsettled
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(a.handle);
                        continue;
                    }
                }
            }
            // Every segment is freed; the first error is reported.
            result = result.and(pool.free(a.handle));
        }
        result
    }

    /// Waits until all work submitted so far, on both lanes, has completed and reclaims deferred
    /// frees. Native only; see [`Runtime::synchronize_async`].
    ///
    /// # Errors
    /// Backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn synchronize(&self) -> Result<()> {
        complete_now(self.synchronize_with(Waiting::Blocking))
    }

    async fn synchronize_with(&self, waiting: Waiting) -> Result<()> {
        self.inner.front.join_transfers()?;
        let t = self.inner.backend.flush()?;
        waiting.ticket(self.inner.backend.as_ref(), t).await?;
        let unsettled = std::mem::take(
            &mut *self
                .inner
                .unsettled
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let pool = self.device_pool();
        let mut result = Ok(());
        for h in unsettled {
            result = result.and(pool.free(h));
        }
        result.and(pool.reclaim())
    }
}

#[cfg(test)]
mod tests;
