//! Blocks: one `VkBuffer` bound to gpu-allocator memory, and synchronous host access to mapped
//! blocks with flush/invalidate of non-coherent memory.
//!
//! Every block is a storage buffer usable as copy source and destination, so any block can be
//! bound to a kernel or copied. Memory comes from gpu-allocator (`GpuOnly` for `DeviceLocal`,
//! `CpuToGpu` for `Upload`, `GpuToCpu` for `Readback`); requests of at least the dedicated
//! threshold get their own `VkDeviceMemory` (drivers place and page large allocations better).
//!
//! Non-coherent memory: allocations are aligned to `nonCoherentAtomSize` and host ranges widened
//! to it ([`crate::conv::atom_range`]), so a flush never touches a neighbour's bytes outside the
//! allocation. Under `force_staging`, `DeviceLocal` blocks are never mapped for host access even
//! when the memory is host-visible (lavapipe), so the discrete-GPU staging path is what runs.
//!
//! A block that grows in place is a sparse buffer whose granules each have their own allocation
//! ([`crate::sparse`]); host access walks the granules a range covers.

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme, Allocator};
use tensormem_contract::{BlockDesc, Error, MemoryKind, Result};

use crate::conv::{align_up, atom_range, memory_location};
use crate::device::Gpu;
use crate::error::{BACKEND, map_alloc, vk_err};
use crate::sparse::{Granules, create_buffer};

/// Options of block creation, from the backend's configuration.
#[derive(Copy, Clone, Debug)]
pub(crate) struct BlockPolicy {
    /// `DeviceLocal` blocks are not host-accessible even where the memory is host-visible.
    pub force_staging: bool,
    /// Requests of at least this many bytes get a dedicated allocation.
    pub dedicated_threshold: u64,
    /// Flush and invalidate even coherent memory (exercises the non-coherent path on lavapipe).
    pub force_flush: bool,
    /// `nonCoherentAtomSize`, a power of two.
    pub atom: u64,
}

/// The memory behind a block's buffer.
pub(crate) enum Memory {
    /// One allocation bound to the whole buffer (`None` once destroyed).
    Whole(Option<Allocation>),
    /// A sparse buffer's granules, each bound to its own allocation or to nothing.
    Sparse(Granules),
}

/// One live block.
pub(crate) struct Block {
    pub buffer: vk::Buffer,
    pub memory: Memory,
    pub kind: MemoryKind,
    /// Usable size in bytes (as requested; a sparse block's committed size).
    pub size: u64,
    /// Whether `write_mapped` / `read_mapped` may touch it.
    pub host_access: bool,
    /// Flush and invalidate even coherent memory ([`BlockPolicy::force_flush`]).
    force_flush: bool,
}

impl Block {
    /// Creates the buffer, allocates and binds its memory.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when neither the driver nor the allocator has room,
    /// [`Error::Backend`] for other native failures.
    pub(crate) fn create(
        gpu: &Gpu,
        allocator: &mut Allocator,
        desc: &BlockDesc<'_>,
        policy: BlockPolicy,
    ) -> Result<Block> {
        let device = &gpu.device;
        // Rounded to the atom so the buffer's requirements (and a dedicated allocation) cover
        // whole atoms; `desc.size` is already at most `max_block_size`.
        let buffer_size = align_up(desc.size, policy.atom.max(4)).ok_or(Error::TooLarge {
            what: "block",
            requested: desc.size,
            limit: gpu.max_block_size,
            limit_name: "max_block_size",
        })?;
        let buffer = create_buffer(gpu, buffer_size, false)?;
        // SAFETY: `buffer` was just created on `device`.
        let mut requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        let dedicated = desc.size >= policy.dedicated_threshold;
        if !dedicated {
            // Sub-allocations start and end on atom boundaries (see `conv::atom_range`). A
            // dedicated allocation must keep the buffer's exact requirements size.
            requirements.alignment = requirements.alignment.max(policy.atom);
            requirements.size =
                align_up(requirements.size, policy.atom).unwrap_or(requirements.size);
        }
        let allocation = allocator
            .allocate(&AllocationCreateDesc {
                name: desc.label,
                requirements,
                location: memory_location(desc.kind),
                linear: true,
                allocation_scheme: if dedicated {
                    AllocationScheme::DedicatedBuffer(buffer)
                } else {
                    AllocationScheme::GpuAllocatorManaged
                },
            })
            .map_err(|e| {
                // SAFETY: the buffer is unused and bound to nothing.
                unsafe { device.destroy_buffer(buffer, None) };
                map_alloc(e, desc.size, desc.kind.name(), desc.label)
            })?;
        // SAFETY: the allocation satisfies the buffer's requirements (type bits, size and an
        // alignment at least the required one) and neither is bound yet.
        let bound =
            unsafe { device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
        if let Err(e) = bound {
            let _ = allocator.free(allocation);
            // SAFETY: unused buffer.
            unsafe { device.destroy_buffer(buffer, None) };
            return Err(vk_err("vkBindBufferMemory")(e));
        }
        let mapped = allocation.mapped_ptr().is_some();
        let host_access = mapped && !(policy.force_staging && desc.kind == MemoryKind::DeviceLocal);
        Ok(Block {
            buffer,
            memory: Memory::Whole(Some(allocation)),
            kind: desc.kind,
            size: desc.size,
            host_access,
            force_flush: policy.force_flush,
        })
    }

    /// A block over a sparse `buffer` with `granules` bound for its first `size` bytes.
    /// `host_visible`: whether memory of its kind is (the granules' allocations are mapped).
    pub(crate) fn sparse(
        buffer: vk::Buffer,
        granules: Granules,
        kind: MemoryKind,
        size: u64,
        host_visible: bool,
        policy: BlockPolicy,
    ) -> Block {
        Block {
            buffer,
            memory: Memory::Sparse(granules),
            kind,
            size,
            host_access: host_visible && !(policy.force_staging && kind == MemoryKind::DeviceLocal),
            force_flush: policy.force_flush,
        }
    }

    /// Destroys the buffer and frees its memory.
    ///
    /// # Safety
    /// No pending or executing command uses the buffer; called once.
    pub(crate) unsafe fn destroy(&mut self, device: &ash::Device, allocator: &mut Allocator) {
        // SAFETY: the caller guarantees the buffer is idle.
        unsafe { device.destroy_buffer(self.buffer, None) };
        match &mut self.memory {
            Memory::Whole(a) => crate::sparse::free_all(allocator, a.take()),
            Memory::Sparse(g) => crate::sparse::free_all(allocator, g.drain()),
        }
    }

    /// Checks host access to `len` bytes at `offset`, then calls `f` with each mapped piece of
    /// the range in order: the view, the piece's offset in it, its offset in the range and its
    /// length. One piece for a whole block; one per granule for a sparse block.
    fn each_mapped(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&MappedView, u64, usize, usize) -> Result<()>,
    ) -> Result<()> {
        if !self.host_access {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: format!(
                    "host access to a {} block (not host-visible{})",
                    self.kind.name(),
                    if self.kind == MemoryKind::DeviceLocal {
                        ", or staging is forced"
                    } else {
                        ""
                    }
                ),
            });
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|end| *end <= self.size)
            .ok_or(Error::OutOfBounds {
                what: "block",
                offset,
                size: len as u64,
                limit: self.size,
            })?;
        if len == 0 {
            return Ok(());
        }
        match &self.memory {
            Memory::Whole(a) => {
                let a = a.as_ref().ok_or_else(|| {
                    Error::invariant("a live block holds its memory", "destroyed")
                })?;
                f(&self.view(a)?, offset, 0, len)
            }
            Memory::Sparse(g) => {
                for (start, a) in g.overlapping(offset, end) {
                    let a = a.ok_or_else(|| {
                        Error::from(tensormem_contract::GrowthError::NotBacked {
                            call: "host access to a block that grows in place",
                            offset: start,
                            size: g.granule(),
                        })
                    })?;
                    let from = offset.max(start);
                    let to = end.min(start + g.granule());
                    let at = (from - offset) as usize;
                    f(&self.view(a)?, from - start, at, (to - from) as usize)?;
                }
                Ok(())
            }
        }
    }

    /// The mapped view of `a`, one of this block's allocations.
    fn view(&self, a: &Allocation) -> Result<MappedView> {
        let ptr = a.mapped_ptr().ok_or_else(|| Error::Unsupported {
            backend: BACKEND,
            what: "host access to unmapped memory".into(),
        })?;
        Ok(MappedView {
            ptr: ptr.as_ptr().cast::<u8>(),
            // SAFETY: reading the handle of a live allocation.
            memory: unsafe { a.memory() },
            offset: a.offset(),
            size: a.size(),
            flush: self.force_flush
                || !a
                    .memory_properties()
                    .contains(vk::MemoryPropertyFlags::HOST_COHERENT),
        })
    }

    fn mapped_range(
        m: &MappedView,
        offset: u64,
        len: u64,
        atom: u64,
    ) -> vk::MappedMemoryRange<'static> {
        let (o, s) = atom_range(m.offset, m.size, offset, len, atom);
        vk::MappedMemoryRange::default()
            .memory(m.memory)
            .offset(o)
            .size(s)
    }

    /// Copies `data` into the block at `offset`, then flushes non-coherent memory.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without host access, [`Error::OutOfBounds`] past the end,
    /// [`tensormem_contract::GrowthError::NotBacked`] over a decommitted granule.
    pub(crate) fn write(
        &self,
        device: &ash::Device,
        atom: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        self.each_mapped(offset, data.len(), |m, at, from, n| {
            // SAFETY: `m.ptr` maps the whole allocation (gpu-allocator maps persistently) and
            // `at + n` lies inside it (checked against the block's size, and a granule's piece
            // inside the granule); the caller guarantees no in-flight work touches the range;
            // `data` cannot overlap device-mapped memory.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr().add(from), m.ptr.add(at as usize), n)
            };
            if m.flush {
                let range = Self::mapped_range(m, at, n as u64, atom);
                // SAFETY: the range is atom-aligned inside a mapped allocation.
                unsafe { device.flush_mapped_memory_ranges(&[range]) }
                    .map_err(vk_err("vkFlushMappedMemoryRanges"))?;
            }
            Ok(())
        })
    }

    /// Invalidates non-coherent memory, then copies from the block at `offset` into `out`.
    ///
    /// # Errors
    /// As [`Block::write`].
    pub(crate) fn read(
        &self,
        device: &ash::Device,
        atom: u64,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        self.each_mapped(offset, out.len(), |m, at, from, n| {
            if m.flush {
                let range = Self::mapped_range(m, at, n as u64, atom);
                // SAFETY: as in `write`.
                unsafe { device.invalidate_mapped_memory_ranges(&[range]) }
                    .map_err(vk_err("vkInvalidateMappedMemoryRanges"))?;
            }
            // SAFETY: as in `write`, reversed.
            unsafe {
                std::ptr::copy_nonoverlapping(m.ptr.add(at as usize), out.as_mut_ptr().add(from), n)
            };
            Ok(())
        })
    }
}

/// The mapped view of an allocation, read under the backend's lock.
struct MappedView {
    ptr: *mut u8,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    /// Whether host access flushes and invalidates (non-coherent memory, or forced).
    flush: bool,
}
