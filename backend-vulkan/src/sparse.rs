//! Blocks that grow in place on Vulkan ([`tensormem_contract::Growable`]): a
//! sparse-residency buffer spans the reservation, and each granule of it is bound to memory with
//! `vkQueueBindSparse` or left unbound.
//!
//! * **Memory per granule.** Each bound granule is one gpu-allocator allocation, sub-allocated
//!   from its large `VkDeviceMemory` blocks (a sparse bind takes any `memoryOffset`, unlike
//!   CUDA's `cuMemMap`), so a grown arena makes a `vkAllocateMemory` call per allocator block,
//!   not per growth, and every granule can be given back or moved alone: shrinking and
//!   decommitting return exactly the granules asked for, and a remap binds the memory that
//!   backed one range to another without allocating.
//! * **Ordering.** Binds go on the compute queue. A bind waits for the work submitted so far on
//!   both lanes (each lane's recorded work is submitted first) and for the previous bind, and
//!   signals the binder's timeline semaphore; each lane's next submission waits for it. So work
//!   recorded after a commit sees the memory, and an unbind never overtakes earlier work.
//! * **Deferred frees.** Memory unbound from a granule goes back to the allocator once its
//!   unbind has executed ([`Binder::reclaim`], at the next sparse call or block allocation), so
//!   no allocation is reused while a pending bind still maps it.
//! * **Address space.** Every live sparse buffer counts against `sparseAddressSpaceSize` (2 GiB on
//!   lavapipe); a reservation beyond it fails with `OutOfMemory`, and the pools add blocks.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme, Allocator};
use tensormem_contract::{Error, InPlaceGrowth, OomReport, Result};

use crate::device::{Gpu, SparseLimits};
use crate::error::{BACKEND, map_alloc, map_vk, vk_err};
use crate::timeline::Timeline;

/// The smallest granule, 64 KiB: the sparse block size of desktop GPUs and the pools' smallest
/// hole granule (`core::pool::arena::holes::MIN_GRANULE`), so no finer unit would be used. Each
/// granule costs one gpu-allocator allocation and one `VkSparseMemoryBind`; a coarser one costs
/// memory instead: at 2 MiB (CUDA's) the MNIST sample's 2.2 MiB arena commits 4 MiB (1.83 × its
/// live peak), at 64 KiB within 5 %.
pub(crate) const MIN_GRANULE: u64 = 64 << 10;

/// What the device offers for blocks that grow in place, read from a probe buffer's memory
/// requirements (the sparse block size is its alignment); `None` where a granule does not fit
/// the limits.
pub(crate) fn growth(gpu: &Gpu, limits: SparseLimits) -> Option<InPlaceGrowth> {
    let probe = create_buffer(gpu, MIN_GRANULE, true).ok()?;
    // SAFETY: `probe` was just created on the device.
    let requirements = unsafe { gpu.device.get_buffer_memory_requirements(probe) };
    // SAFETY: unused buffer, bound to nothing.
    unsafe { gpu.device.destroy_buffer(probe, None) };
    let granularity = requirements
        .alignment
        .max(MIN_GRANULE)
        .checked_next_power_of_two()?;
    let max_reserve = limits.address_space.min(limits.max_buffer) & !(granularity - 1);
    (max_reserve >= granularity).then_some(InPlaceGrowth {
        granularity,
        max_reserve,
        holes: true,
        // A sparse bind takes any granule range.
        whole_units: false,
    })
}

/// Creates a buffer of every block's usages (storage, both transfer directions), shared between
/// the lanes' families where they differ; `sparse`: with sparse residency, bound later by granule.
pub(crate) fn create_buffer(gpu: &Gpu, size: u64, sparse: bool) -> Result<vk::Buffer> {
    let families = gpu.sharing_families();
    let mut info = vk::BufferCreateInfo::default().size(size).usage(
        vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST,
    );
    if sparse {
        info = info
            .flags(vk::BufferCreateFlags::SPARSE_BINDING | vk::BufferCreateFlags::SPARSE_RESIDENCY);
    }
    info = match &families {
        Some(f) => info
            .sharing_mode(vk::SharingMode::CONCURRENT)
            .queue_family_indices(f),
        None => info.sharing_mode(vk::SharingMode::EXCLUSIVE),
    };
    // SAFETY: `info` is valid (non-zero size, supported usage; sparse flags only on a device
    // created with sparseBinding and sparseResidencyBuffer); the device is live.
    unsafe { gpu.device.create_buffer(&info, None) }.map_err(|e| map_vk("vkCreateBuffer", e, size))
}

/// The backend's sparse binding: its timeline semaphore, the memory waiting for its unbind to
/// execute, and the address space in use.
pub(crate) struct Binder {
    /// Signalled by each bind, to the bind's value.
    semaphore: vk::Semaphore,
    /// The value of the last bind submitted.
    signalled: u64,
    /// Allocations unbound by the bind of each value, freed once it has executed.
    retired: VecDeque<(u64, Vec<Allocation>)>,
    /// What [`tensormem_contract::Growable::in_place_growth`] reports.
    pub growth: InPlaceGrowth,
    /// `sparseAddressSpaceSize`, and the bytes live sparse buffers span.
    address_space: u64,
    used: u64,
}

impl Binder {
    /// Creates the binder's semaphore.
    pub(crate) fn new(gpu: &Gpu, growth: InPlaceGrowth, limits: SparseLimits) -> Result<Binder> {
        let semaphore = gpu.timeline_semaphore()?;
        Ok(Binder {
            semaphore,
            signalled: 0,
            retired: VecDeque::new(),
            growth,
            address_space: limits.address_space,
            used: 0,
        })
    }

    /// Counts `bytes` of address space for a new sparse buffer.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] beyond `sparseAddressSpaceSize`.
    pub(crate) fn claim(&mut self, bytes: u64, label: &str) -> Result<()> {
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.address_space => {
                self.used = total;
                Ok(())
            }
            _ => Err(Error::OutOfMemory(Box::new(OomReport {
                pool: format!(
                    "vulkan sparse address space ({} of {} bytes in use)",
                    self.used, self.address_space
                ),
                label: (!label.is_empty()).then(|| label.to_owned()),
                requested: bytes,
                ..OomReport::default()
            }))),
        }
    }

    /// Returns the address space of a destroyed sparse buffer.
    pub(crate) fn release(&mut self, bytes: u64) {
        self.used -= bytes.min(self.used);
    }

    /// Submits `binds` of `buffer` on the compute queue, ordered after every call so far: each
    /// lane's recorded work is submitted, the bind waits for it and for the previous bind, and
    /// the lanes' next submissions wait for the bind. Returns the bind's value.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] (the lanes are then marked lost), [`Error::OutOfMemory`],
    /// [`Error::Backend`]; nothing is bound then.
    pub(crate) fn bind(
        &mut self,
        gpu: &Gpu,
        compute: &mut Timeline,
        mut transfer: Option<&mut Timeline>,
        buffer: vk::Buffer,
        binds: &[vk::SparseMemoryBind],
    ) -> Result<u64> {
        if let Some(t) = transfer.as_deref_mut() {
            t.submit(gpu)?;
        }
        compute.submit(gpu)?;
        let mut waits = vec![
            (compute.semaphore(), compute.submitted().0),
            (self.semaphore, self.signalled),
        ];
        if let Some(t) = transfer.as_deref() {
            waits.push((t.semaphore(), t.submitted().0));
        }
        waits.retain(|w| w.1 > 0);
        let wait_semaphores: Vec<vk::Semaphore> = waits.iter().map(|w| w.0).collect();
        let wait_values: Vec<u64> = waits.iter().map(|w| w.1).collect();
        let value = self.signalled + 1;
        let signal_semaphores = [self.semaphore];
        let signal_values = [value];
        let buffer_binds = [vk::SparseBufferMemoryBindInfo::default()
            .buffer(buffer)
            .binds(binds)];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let info = vk::BindSparseInfo::default()
            .wait_semaphores(&wait_semaphores)
            .buffer_binds(&buffer_binds)
            .signal_semaphores(&signal_semaphores)
            .push_next(&mut timeline_info);
        // SAFETY: the compute family supports sparse binding (checked when the device was
        // created); the buffer is a live sparse buffer; every bind lies inside it, on whole
        // granules (multiples of its alignment), with memory of an allowed type at an aligned
        // offset inside its allocation, or null to unbind; every awaited value's signal was
        // submitted before, and the signalled value exceeds the previous one; the queue is only
        // used under the backend's lock.
        let result = unsafe {
            gpu.device
                .queue_bind_sparse(gpu.compute.queue, &[info], vk::Fence::null())
        };
        if let Err(e) = result {
            if e == vk::Result::ERROR_DEVICE_LOST {
                compute.lost = true;
            }
            return Err(map_vk("vkQueueBindSparse", e, 0));
        }
        self.signalled = value;
        compute.after_bind(self.semaphore, value);
        if let Some(t) = transfer {
            t.after_bind(self.semaphore, value);
        }
        Ok(value)
    }

    /// Keeps `allocations`, unbound by the bind of `value`, until it has executed.
    pub(crate) fn retire(&mut self, value: u64, allocations: Vec<Allocation>) {
        if !allocations.is_empty() {
            self.retired.push_back((value, allocations));
        }
    }

    /// Frees the retired allocations whose unbind has executed. Never blocks.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] from reading the semaphore.
    pub(crate) fn reclaim(&mut self, gpu: &Gpu, allocator: &mut Allocator) -> Result<()> {
        if self.retired.is_empty() {
            return Ok(());
        }
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let done = unsafe { gpu.device.get_semaphore_counter_value(self.semaphore) }
            .map_err(vk_err("vkGetSemaphoreCounterValue"))?;
        while self.retired.front().is_some_and(|(v, _)| *v <= done) {
            if let Some((_, allocations)) = self.retired.pop_front() {
                free_all(allocator, allocations);
            }
        }
        Ok(())
    }

    /// Blocks until the bind of `value` has executed, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::DeviceLost`].
    pub(crate) fn wait(&self, gpu: &Gpu, value: u64, timeout: Duration) -> Result<()> {
        if value == 0 {
            return Ok(());
        }
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: waiting on a live timeline semaphore for a value a submitted bind signals.
        match unsafe { gpu.device.wait_semaphores(&info, nanos) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(Error::Timeout {
                backend: BACKEND,
                what: format!("sparse bind {value} (vkWaitSemaphores)"),
                timeout,
            }),
            Err(e) => Err(map_vk("vkWaitSemaphores", e, 0)),
        }
    }

    /// Frees every retired allocation and destroys the semaphore.
    ///
    /// # Safety
    /// The device is idle; called once.
    pub(crate) unsafe fn destroy(&mut self, device: &ash::Device, allocator: &mut Allocator) {
        for (_, allocations) in self.retired.drain(..) {
            free_all(allocator, allocations);
        }
        // SAFETY: the device is idle, so no bind or submission uses the semaphore.
        unsafe { device.destroy_semaphore(self.semaphore, None) };
    }
}

/// Frees allocations no bind maps any more. Freeing fails only for a foreign or null
/// allocation, a bug here that nothing could repair.
pub(crate) fn free_all(
    allocator: &mut Allocator,
    allocations: impl IntoIterator<Item = Allocation>,
) {
    for a in allocations {
        let _ = allocator.free(a);
    }
}

/// The memory of one sparse buffer: an allocation for each bound granule.
pub(crate) struct Granules {
    /// Bytes the buffer spans.
    pub reserve: u64,
    /// Bytes per granule ([`InPlaceGrowth::granularity`]).
    granule: u64,
    /// The bound granules by index.
    bound: BTreeMap<u64, Allocation>,
    /// What each granule's allocation must satisfy: the buffer's memory types and alignment.
    requirements: vk::MemoryRequirements,
    location: MemoryLocation,
    /// The value of the last bind of this buffer, which must execute before it is destroyed.
    pub last_bind: u64,
}

impl Granules {
    /// An unbound buffer of `reserve` bytes whose memory has `requirements`.
    pub(crate) fn new(
        reserve: u64,
        granule: u64,
        requirements: vk::MemoryRequirements,
        location: MemoryLocation,
    ) -> Granules {
        Granules {
            reserve,
            granule,
            bound: BTreeMap::new(),
            requirements,
            location,
            last_bind: 0,
        }
    }

    /// The granule indices of the byte range `[offset, offset + size)` (whole granules).
    pub(crate) fn indices(&self, offset: u64, size: u64) -> std::ops::Range<u64> {
        offset / self.granule..(offset + size) / self.granule
    }

    /// Allocates memory for each of `indices`, in order.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the allocator has no room; nothing stays allocated.
    pub(crate) fn allocate(
        &self,
        allocator: &mut Allocator,
        indices: &[u64],
        label: &str,
    ) -> Result<Vec<Allocation>> {
        let requirements = vk::MemoryRequirements {
            size: self.granule,
            ..self.requirements
        };
        let mut out = Vec::with_capacity(indices.len());
        for _ in indices {
            let a = allocator.allocate(&AllocationCreateDesc {
                name: label,
                requirements,
                location: self.location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            });
            match a {
                Ok(a) => out.push(a),
                Err(e) => {
                    free_all(allocator, out);
                    let bytes = self.granule * indices.len() as u64;
                    return Err(map_alloc(e, bytes, "sparse granule", label));
                }
            }
        }
        Ok(out)
    }

    /// The bind of granule `index` to `memory` (unbinds it when `None`).
    pub(crate) fn bind_of(&self, index: u64, memory: Option<&Allocation>) -> vk::SparseMemoryBind {
        let bind = vk::SparseMemoryBind::default()
            .resource_offset(index * self.granule)
            .size(self.granule);
        match memory {
            // SAFETY: reading the handle of a live allocation.
            Some(a) => bind.memory(unsafe { a.memory() }).memory_offset(a.offset()),
            None => bind,
        }
    }

    /// Whether granule `index` is bound.
    pub(crate) fn is_bound(&self, index: u64) -> bool {
        self.bound.contains_key(&index)
    }

    /// Records `allocations` as bound at `indices`.
    pub(crate) fn insert(&mut self, indices: &[u64], allocations: Vec<Allocation>) {
        self.bound.extend(indices.iter().copied().zip(allocations));
    }

    /// Takes the allocations of the bound granules among `indices` (the unbound are skipped).
    pub(crate) fn take(&mut self, indices: impl Iterator<Item = u64>) -> Vec<(u64, Allocation)> {
        indices
            .filter_map(|i| self.bound.remove(&i).map(|a| (i, a)))
            .collect()
    }

    /// Takes the allocations of every granule at or past `index`.
    pub(crate) fn take_from(&mut self, index: u64) -> Vec<(u64, Allocation)> {
        self.bound.split_off(&index).into_iter().collect()
    }

    /// The bound granules overlapping `[offset, end)`, in order, with each one's byte offset.
    pub(crate) fn overlapping(
        &self,
        offset: u64,
        end: u64,
    ) -> impl Iterator<Item = (u64, Option<&Allocation>)> {
        let g = self.granule;
        (offset / g..end.div_ceil(g)).map(move |i| (i * g, self.bound.get(&i)))
    }

    /// Bytes per granule.
    pub(crate) fn granule(&self) -> u64 {
        self.granule
    }

    /// Every bound allocation, for destruction.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Allocation> {
        std::mem::take(&mut self.bound).into_values()
    }
}
