//! [`VulkanBackend`]: the `Backend` implementation tying device, blocks, the lanes' timelines,
//! barriers and kernels together under one lock, and its configuration.
//!
//! Every call takes the backend's mutex: Vulkan requires external synchronisation of the queue,
//! the command buffer being recorded and the allocator, and the calls are short (recording, not
//! executing). Destruction order in `Drop`: wait idle, batches and semaphore, pipelines, blocks,
//! the sparse binder (its semaphore and the memory it still holds), the allocator, the device, the
//! messenger, the instance.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use gpu_allocator::{AllocationSizes, AllocatorDebugSettings};
use tensormem_contract::{
    Backend, BlockDesc, BlockId, BlockRange, BlockTable, Capabilities, Error, Growable,
    InPlaceGrowth, Managed, ManagedMemory, MemoryKind, Op, Result, Ticket,
};

use crate::blocks::{Block, BlockPolicy};
use crate::config::{CustomKernel, VulkanConfig};
use crate::device::{Gpu, RawVulkan};
use crate::error::BACKEND;
use crate::sparse::Binder;

mod copies;
mod dispatch;
mod inspect;
mod lanes;
mod sparse;

use crate::instance::{
    ValidationLog, create_instance, keep_driver_loaded, load_entry, validation_layer_present,
};
use crate::kernels::{KernelCache, KernelSpec, StorageSlot};
use crate::timeline::{Lane, Timeline};

struct State {
    gpu: Gpu,
    allocator: ManuallyDrop<Allocator>,
    blocks: BlockTable<Block>,
    /// The compute lane: dispatches, and the copies and fills of the original contract.
    compute: Timeline,
    /// The transfer lane (`lanes`); `None` when it is collapsed onto `compute`
    /// ([`TransferQueue::Off`](crate::TransferQueue::Off)).
    transfer: Option<Timeline>,
    kernels: KernelCache,
    policy: BlockPolicy,
    /// Sparse binding for blocks that grow in place; `None` where the device does not offer it
    /// or [`VulkanConfig::sparse_growth`] is off.
    binder: Option<Binder>,
    /// Adopted handles are not destroyed and the device is not waited on as a whole.
    owns_device: bool,
}

/// The tensormem backend on one Vulkan device. See the crate doc.
pub struct VulkanBackend {
    caps: Capabilities,
    /// What [`Growable::in_place_growth`] reports (the binder's, read without the lock).
    growth: Option<InPlaceGrowth>,
    config: VulkanConfig,
    state: Mutex<State>,
    validation: Option<Arc<ValidationLog>>,
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

impl VulkanBackend {
    /// Creates an instance and a device.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the loader, a driver, a suitable device or (with
    /// validation) the validation layer is missing; [`Error::Backend`] for other failures.
    pub fn new(config: VulkanConfig) -> Result<VulkanBackend> {
        let entry = load_entry()?;
        keep_driver_loaded(&entry);
        let validation = (config.validation || env_flag("TENSORMEM_VULKAN_VALIDATION"))
            .then(|| Arc::new(ValidationLog::default()));
        let owned = create_instance(&entry, validation.clone())?;
        let gpu = Gpu::create(
            entry,
            owned,
            config.device_name.as_deref(),
            config.transfer_queue,
            config.sparse_growth,
        )?;
        Self::finish(gpu, config, validation, true)
    }

    /// Adopts an application's instance, device and queue. tensormem creates its own objects on
    /// them (buffers, pools, a semaphore) and destroys only those.
    ///
    /// # Safety
    /// * `raw.device` was created from `raw.instance` on `raw.physical_device` with
    ///   `VkPhysicalDeviceVulkan12Features::timelineSemaphore` enabled, and `raw.queue` is queue
    ///   of family `raw.queue_family_index` on it;
    /// * the application does not submit to `raw.queue` while a call of this backend runs
    ///   (Vulkan requires external synchronisation of queues);
    /// * the instance and device outlive the backend.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the device lacks Vulkan 1.2 or timeline semaphores.
    pub unsafe fn from_raw(raw: RawVulkan, config: VulkanConfig) -> Result<VulkanBackend> {
        let gpu = Gpu::adopt(raw, config.transfer_queue)?;
        Self::finish(gpu, config, None, false)
    }

    /// Whether the Khronos validation layer is installed, i.e. whether `validation: true` can
    /// succeed. `false` also when the loader itself is missing.
    pub fn validation_available() -> bool {
        load_entry().is_ok_and(|e| validation_layer_present(&e))
    }

    fn finish(
        mut gpu: Gpu,
        config: VulkanConfig,
        validation: Option<Arc<ValidationLog>>,
        owns_device: bool,
    ) -> Result<VulkanBackend> {
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: gpu.instance.clone(),
            device: gpu.device.clone(),
            physical_device: gpu.physical,
            debug_settings: AllocatorDebugSettings::default(),
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: nothing was created on the device yet.
                unsafe { gpu.destroy() };
                return Err(Error::Backend {
                    backend: BACKEND,
                    api: "gpu_allocator::Allocator::new",
                    code: 0,
                    message: e.to_string(),
                });
            }
        };
        let mut allocator = allocator;
        let (compute, transfer) = match Self::timelines(&gpu, &mut allocator) {
            Ok(t) => t,
            Err(e) => {
                drop(allocator);
                // SAFETY: the allocator (the only child) is gone.
                unsafe { gpu.destroy() };
                return Err(e);
            }
        };
        let limits = gpu.limits;
        let caps = Capabilities {
            backend: "vulkan",
            device_name: gpu.name.clone(),
            device_type: crate::conv::map_device_type(gpu.device_type),
            binding_align: limits.min_storage_buffer_offset_alignment.max(4),
            copy_align: 4,
            max_block_size: gpu.max_block_size,
            max_binding_size: u64::from(limits.max_storage_buffer_range),
            device_host_visible: !config.force_staging && device_local_is_host_visible(&gpu),
            queued_write_max: 0,
            budget: Some(gpu.budget),
            // Every block is a buffer with both transfer usages, and `Upload`/`Readback` memory
            // is host-visible memory the device reads and writes: copies go either way.
            host_visible_copies: true,
            host_placement: gpu.host_placement.clone(),
        };
        let policy = BlockPolicy {
            force_staging: config.force_staging,
            dedicated_threshold: config.dedicated_threshold,
            force_flush: config.force_flush,
            atom: limits.non_coherent_atom_size.max(1).next_power_of_two(),
        };
        // A device that cannot create one more semaphore grows by blocks, as without sparse
        // binding.
        let binder = gpu
            .sparse
            .filter(|_| config.sparse_growth)
            .and_then(|limits| {
                Binder::new(&gpu, crate::sparse::growth(&gpu, limits)?, limits).ok()
            });
        Ok(VulkanBackend {
            caps,
            growth: binder.as_ref().map(|b| b.growth),
            config,
            state: Mutex::new(State {
                gpu,
                allocator: ManuallyDrop::new(allocator),
                blocks: BlockTable::new(BACKEND),
                compute,
                transfer,
                kernels: KernelCache::default(),
                policy,
                binder,
                owns_device,
            }),
            validation,
        })
    }

    /// The lanes' timelines, paired when there is a transfer lane.
    fn timelines(gpu: &Gpu, allocator: &mut Allocator) -> Result<(Timeline, Option<Timeline>)> {
        let mut compute = Timeline::new(gpu, Lane::Compute, gpu.compute)?;
        let Some((queue, _)) = gpu.transfer else {
            return Ok((compute, None));
        };
        match Timeline::new(gpu, Lane::Transfer, queue) {
            Ok(mut transfer) => {
                Timeline::pair(&mut compute, &mut transfer);
                if let Some(t) = gpu.timestamps {
                    compute.measure_waits(t);
                }
                Ok((compute, Some(transfer)))
            }
            Err(e) => {
                // SAFETY: nothing was submitted on the compute lane yet; called once.
                unsafe { compute.destroy(&gpu.device, allocator) };
                Err(e)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enqueues a custom WGSL kernel over `bindings` (one range per [`CustomKernel::bindings`]).
    ///
    /// # Errors
    /// As [`Backend::dispatch`], plus [`Error::Backend`] (api `naga…`) when the WGSL does not
    /// compile.
    pub fn dispatch_custom(
        &self,
        kernel: &CustomKernel<'_>,
        bindings: &[BlockRange],
    ) -> Result<Ticket> {
        let spec = KernelSpec {
            key: kernel.key,
            source: kernel.source,
            entry: kernel.entry,
            storage: kernel
                .bindings
                .iter()
                .map(|b| StorageSlot {
                    binding: b.binding,
                    write: b.write,
                })
                .collect(),
            params_binding: kernel.params_binding,
            params: kernel.params,
            workgroups: kernel.workgroups,
        };
        self.dispatch_spec(&spec, bindings)
    }

    /// The kind of the block a range addresses, after the table's lookup and bounds check
    /// (kept for a direct caller's sake: out-of-bounds device access is undefined behaviour).
    /// Alignment and emptiness are the front's rules, asserted in debug builds.
    fn check_range(s: &State, r: &BlockRange, what: &'static str) -> Result<MemoryKind> {
        debug_assert!(r.size > 0, "vulkan: empty {what} (the front refuses it)");
        Ok(s.blocks.range(*r, what)?.kind)
    }

    /// Whether a range's offset and size are multiples of `copy_align` (the front's rule; fills
    /// need 4-byte multiples).
    fn copy_aligned(&self, r: &BlockRange) -> bool {
        r.offset.is_multiple_of(self.caps.copy_align) && r.size.is_multiple_of(self.caps.copy_align)
    }
}

/// Whether gpu-allocator's `GpuOnly` choice (the first `DEVICE_LOCAL` type a storage buffer may
/// use) is host-visible: true on lavapipe and integrated GPUs, false on discrete ones.
fn device_local_is_host_visible(gpu: &Gpu) -> bool {
    // SAFETY: `physical` belongs to `instance`.
    let mem = unsafe {
        gpu.instance
            .get_physical_device_memory_properties(gpu.physical)
    };
    let types = &mem.memory_types[..mem.memory_type_count as usize];
    types
        .iter()
        .find(|t| {
            t.property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .is_some_and(|t| {
            t.property_flags
                .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
        })
}

impl State {
    /// Fails with [`Error::DeviceLost`] once either lane saw the device lost.
    fn check_alive(&self) -> Result<()> {
        self.compute.check_alive()?;
        self.transfer.as_ref().map_or(Ok(()), Timeline::check_alive)
    }

    /// The timeline of `lane` (the compute lane's when the transfer lane is collapsed), with
    /// the device and the allocator it records with.
    fn lane(&mut self, lane: Lane) -> (&mut Timeline, &Gpu, &mut Allocator) {
        let timeline = match (lane, self.transfer.as_mut()) {
            (Lane::Transfer, Some(t)) => t,
            _ => &mut self.compute,
        };
        (timeline, &self.gpu, &mut self.allocator)
    }
}

impl Backend for VulkanBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        debug_assert!(
            desc.size > 0 && desc.size <= self.caps.max_block_size,
            "vulkan: block of {} bytes (the front refuses zero and > max_block_size)",
            desc.size
        );
        if desc.kind == MemoryKind::Managed && self.extensions().managed.is_none() {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "managed blocks on a device whose memory is not host-visible".into(),
            });
        }
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        if let Some(b) = s.binder.as_mut() {
            // Memory that executed unbinds released is free for the new block.
            b.reclaim(&s.gpu, &mut s.allocator)?;
        }
        let block = Block::create(&s.gpu, &mut s.allocator, desc, s.policy)?;
        Ok(s.blocks.insert(desc.kind, desc.size, block))
    }

    fn extensions(&self) -> tensormem_contract::Extensions<'_> {
        tensormem_contract::Extensions {
            managed: {
                self.caps
                    .device_host_visible
                    .then_some(self as &dyn Managed)
            },
            growable: self.growth.map(|_| self as &dyn Growable),
            transfer_lanes: Some(self),
            ..tensormem_contract::Extensions::default()
        }
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        self.before_free_sparse(s, block)?;
        let mut b = s.blocks.remove(block)?;
        s.compute.tracker.forget_block(block.0);
        if let Some(t) = s.transfer.as_mut() {
            t.tracker.forget_block(block.0);
        }
        // SAFETY: the caller guarantees no in-flight work uses the block (contract); recorded but
        // unsubmitted work would be a caller bug the pools prevent by waiting on tickets.
        unsafe { b.destroy(&s.gpu.device, &mut s.allocator) };
        Ok(())
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        let s = self.lock();
        let b = s.blocks.get(block)?;
        b.write(&s.gpu.device, s.policy.atom, offset, data)
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        let s = self.lock();
        let b = s.blocks.get(block)?;
        b.read(&s.gpu.device, s.policy.atom, offset, out)
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.record_copy(Lane::Compute, src, dst)
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.record_fill(Lane::Compute, range)
    }

    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        let kernel = crate::ops::kernel_for(op, bindings)?;
        self.dispatch_spec(&kernel.spec(), &kernel.ranges)
    }

    /// Submits both lanes (the transfer lane first: compute work may wait for it).
    fn flush(&self) -> Result<Ticket> {
        let mut guard = self.lock();
        let s = &mut *guard;
        if let Some(t) = s.transfer.as_mut() {
            t.submit(&s.gpu)?;
        }
        s.compute.submit(&s.gpu)
    }

    fn completed(&self) -> Result<Ticket> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let submitted = s.compute.submit(&s.gpu)?;
        let done = s.compute.recycle(&s.gpu)?;
        Ok(Ticket(done.min(submitted.0)))
    }

    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        if !s.compute.issue(&s.gpu, ticket.0)? {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: s.compute.submitted().0,
            });
        }
        let limit = timeout.unwrap_or(self.config.wait_timeout);
        s.compute.wait_until(&s.gpu, ticket.0, limit)
    }
}

impl Managed for VulkanBackend {
    fn managed_memory(&self) -> ManagedMemory {
        ManagedMemory::SameMemory
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // Submit what is recorded so nothing is left half-built (the transfer lane first:
        // compute batches may wait for it), then wait for all of it.
        if let Some(t) = s.transfer.as_mut() {
            let _ = t.submit(&s.gpu);
        }
        let _ = s.compute.submit(&s.gpu);
        if s.owns_device {
            // SAFETY: the device is live; waiting has no other precondition.
            let _ = unsafe { s.gpu.device.device_wait_idle() };
        } else {
            // No limit: destroying buffers the device still uses is undefined behaviour, so a
            // hung device must hang the drop rather than let it free memory in use.
            for t in std::iter::once(&mut s.compute).chain(s.transfer.as_mut()) {
                let last = t.submitted().0;
                let _ = t.wait(&s.gpu, last, Duration::MAX);
            }
        }
        // SAFETY: the device is idle (or our work on an adopted one has finished), and each
        // destroy runs once, children before parents: batches and semaphore, pipelines, blocks,
        // the binder, then the allocator's memory, then the device and instance.
        unsafe {
            if let Some(t) = s.transfer.as_mut() {
                t.destroy(&s.gpu.device, &mut s.allocator);
            }
            s.compute.destroy(&s.gpu.device, &mut s.allocator);
            s.kernels.destroy(&s.gpu.device);
            for (_, mut b) in s.blocks.drain() {
                b.destroy(&s.gpu.device, &mut s.allocator);
            }
            if let Some(b) = s.binder.as_mut() {
                b.destroy(&s.gpu.device, &mut s.allocator);
            }
            ManuallyDrop::drop(&mut s.allocator);
            s.gpu.destroy();
        }
    }
}
